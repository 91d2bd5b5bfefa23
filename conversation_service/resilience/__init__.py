"""How the ConversationService copes with the Agent Service being down: the circuit breaker, its
metrics, and the Agent Service's health as ``/health`` reports it."""
