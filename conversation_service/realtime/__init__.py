"""Live frames of a conversation: seq allocation, group-committed persistence, hub fan-out,
and the WebSocket endpoint with ``?after_seq=N`` replay."""
