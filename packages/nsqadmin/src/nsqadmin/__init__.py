"""nsqadmin (placeholder until its issue lands)."""
