"""Session correlation: which Agent Service session a conversation is talking to (Story 2)."""
