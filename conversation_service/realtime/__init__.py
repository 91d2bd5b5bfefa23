"""Live frames of a conversation: seq allocation, group-committed persistence, hub fan-out."""
