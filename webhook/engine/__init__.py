"""The rule engine and its checks: pure functions from a subject and facts to a decision.

Nothing in this package does I/O: no web server, API client, event loop, TLS or files.
"""
