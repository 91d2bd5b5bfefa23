"""The WebSocket clients of a conversation's live stream: handshake, replay, live frames, what they send."""
