"""History hydration: the window of a conversation's past messages handed to the agent (Story 3)."""
