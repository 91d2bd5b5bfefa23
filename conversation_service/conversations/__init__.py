"""Conversations: create, list, read; every access checks the owner."""
