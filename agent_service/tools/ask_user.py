"""``ask_user``: the model asks the user a question and waits for the answer.

The run engine intercepts this call before dispatch: it pauses the run (``AWAITING_USER``, an
``ASK_USER`` event) and resumes it when an execute request brings the ``answer``, which becomes this
call's result. ``run`` only turns a missing interception into an error the model can read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agent_service.tools.base import Tool, ToolContext, ToolError, required_text

ASK_USER_TOOL_NAME = "ask_user"
MAX_QUESTION_CHARS = 1000


def validate_question(args: dict[str, Any]) -> str:
    """The question of an ``ask_user`` call, checked; for the run engine before it pauses."""
    return required_text(args, "question", MAX_QUESTION_CHARS)


class AskUserTool(Tool):
    name = ASK_USER_TOOL_NAME
    description = (
        "Ask the user a question when you need information only they have (for example a destination "
        "or a date). The run pauses until they answer; their answer comes back as this tool's result."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "description": "One clear question for the user",
                "maxLength": MAX_QUESTION_CHARS,
            }
        },
        "required": ["question"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError("ask_user is answered by the user, not executed; the run engine must pause for it")
