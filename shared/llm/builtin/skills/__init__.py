"""The built-in model's skills, one module each; ``shared.llm.builtin.model`` asks them in order."""
