"""Dead letters an operator lists, reads and replays (``python -m conversation_service dead-letters``)."""
