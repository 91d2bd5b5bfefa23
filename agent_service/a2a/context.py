"""The A2A message a run serves, for whatever the run calls.

Set while the A2A layer starts or resumes a run: the run's task inherits it (asyncio copies the
context into a task when it creates it), so a hook or a model provider of that run can tell which
A2A message it answers. The A2A conformance kit's scripted model picks its scenario by the
message id; nothing in the product branches on it.
"""

from __future__ import annotations

from contextvars import ContextVar

inbound_message_id: ContextVar[str | None] = ContextVar("a2a_inbound_message_id", default=None)
