"""The agent's tools: one module per tool, collected by ``registry.build_registry``."""
