"""Lifecycle hooks: extension points around the agent loop (``base``), run isolated from it
(``runner``), loaded from the settings or entry points (``loading``); two are shipped, an audit log
(``audit``) and a per-organisation tool block (``tool_block``)."""
