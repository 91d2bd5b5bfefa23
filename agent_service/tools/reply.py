"""``reply``: the model answers the user with one direct message and ends its turn.

For a simple exchange with nothing to follow (a greeting, a one-line fact). The run engine
intercepts the call: the text is the run's answer (an ANSWER_CHUNK, so every reader sees it as
any answer) and the run completes with ``COMPLETE.direct``, which A2A hands back as a Message
instead of a task. The text arrives whole, not token by token: a profile offers this tool when
its clients prefer a message to a task (agents calling over A2A), not for the chat's long answers.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agent_service.tools.base import Tool, ToolContext, ToolError, required_text

REPLY_TOOL_NAME = "reply"
MAX_REPLY_CHARS = 16_000
# What the model reads back, and what tool calls of the same turn after the reply read.
SENT = {"sent": True}
NOT_RUN = "not run: the reply ended the turn"


def validate_reply(args: dict[str, Any]) -> str:
    """The text of a ``reply`` call, checked; for the run engine before it ends the run."""
    return required_text(args, "text", MAX_REPLY_CHARS)


class ReplyTool(Tool):
    name = REPLY_TOOL_NAME
    description = (
        "Answer the user directly with one short message and end your turn, when the request is simple "
        "and needs no work to follow (a greeting, a quick fact). For anything longer, answer normally."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The whole message for the user", "maxLength": MAX_REPLY_CHARS},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("reply is not executed; the run engine ends the turn with it")
