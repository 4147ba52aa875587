"""A Trio client library for NSQ."""
