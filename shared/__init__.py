"""Code both services import: the wire contract, SSE helpers, LLM providers, logging, metrics, db."""
