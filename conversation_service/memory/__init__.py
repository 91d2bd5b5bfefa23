"""What the agent remembers about the signed-in user, to see and delete (the Agent Service keeps it)."""
