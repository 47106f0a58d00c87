"""Dry-run audits: manifests and live clusters through the same engine, and their reports."""
