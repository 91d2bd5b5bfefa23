"""The direct path: the configured LLM provider answers the message itself."""
