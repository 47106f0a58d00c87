"""`gpu-admission rules`: check, test, explain and schema for platform teams editing rule files."""
