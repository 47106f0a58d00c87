"""The rule set: pydantic models of what a rule file may say, and their resolution."""
