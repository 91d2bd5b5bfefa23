"""The agent's pending questions (ASK_USER): answering them, and expiring those left unanswered."""
