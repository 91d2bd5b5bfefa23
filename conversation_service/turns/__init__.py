"""Turns: the reply to each accepted message, owned by one replica under a lease."""
