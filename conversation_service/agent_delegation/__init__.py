"""The delegated turn: the dispatcher routes a message, AgentDelegation runs its agent call (claim, execute, fallback), the processor maps its events onto frames."""
