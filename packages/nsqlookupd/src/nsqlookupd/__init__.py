"""nsqlookupd (placeholder until its issue lands)."""
