"""Writing the previous answer to a file with the ``create_file`` tool: "write that to a file",
"save it as trip.md", "put your answer in notes.txt"."""

from __future__ import annotations

import re

from shared.llm.builtin.skill import BuiltinReply, Skill, ToolResult, Turn

TOOL = "create_file"
DEFAULT_NAME = "answer.md"

_NAME = r"[\w-]{1,64}\.(?:txt|md|csv|json|html|py|yaml|yml|xml|log)"
_WRITE = re.compile(
    rf"\b(?:write|save|put|export|store)\b.{{0,40}}?\b(?:(?:in|into|to|as)\s+(?:a\s+|the\s+)?(?:text\s+)?file|"
    rf"(?:in|into|to|as)\s+{_NAME})\b", re.IGNORECASE,
)
_FILE_NAME = re.compile(rf"\b({_NAME})\b", re.IGNORECASE)


def respond(turn: Turn) -> BuiltinReply | None:
    if not _WRITE.search(turn.text):
        return None
    if not turn.offers(TOOL):
        return BuiltinReply(text="I can't write files here: I'm the built-in offline model and no file tool is "
                                 "available in this chat.")
    previous = next((m for m in reversed(turn.history) if m.role == "assistant" and m.content.strip()), None)
    if previous is None:
        return BuiltinReply(text="There is nothing to write yet: ask me something first, then ask me to save "
                                 "the answer to a file.")
    named = _FILE_NAME.search(turn.text)
    name = named.group(1) if named else DEFAULT_NAME
    reasoning = f"The user wants my previous answer as a file. I will write it to {name} with the {TOOL} tool."
    return turn.call(TOOL, {"name": name, "content": previous.content}, reasoning=reasoning)


def answer(result: ToolResult) -> str | None:
    if result.error is not None or not isinstance(result.value, dict):
        return None
    name, size = result.value.get("name"), result.value.get("size")
    return f"I saved it as {name} ({size} bytes); you can download it from this message."


SKILL = Skill(respond, tool=TOOL, answer=answer)
