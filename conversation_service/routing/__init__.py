"""Message routing: whether a chat message goes to the Agent Service or to the direct LLM (Story 4)."""
