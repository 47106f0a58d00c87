"""The HTTP wing: the HTTPS and probe ports, HTTP/1.1 per connection, what each client may
cost, and the route table. It knows requests and answers as bytes and nothing of reviews,
rules or cluster facts (an import contract in pyproject.toml keeps it so); `webhook.server`
plugs the review routes into it."""
