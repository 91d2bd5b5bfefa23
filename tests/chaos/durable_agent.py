"""The Agent Service as the durable-run chaos tests run it: ``python -m tests.chaos.durable_agent --host H --port P``.

The product's app (``create_app``) with what the tests need to land a SIGKILL at a chosen point of a
multi-step run, and to count what ran:

- a scripted model (``StepModel``), deterministic and paced like a real one: it says ``PRE`` and calls
  ``lookup``; with its result, after a pause (the gap between steps), says ``MID`` and calls
  ``send_note``; with that result, streams the final answer (``final_answer``), which says whether the
  note's outcome is known;
- two test tools that count their calls in files of ``CHAOS_DIR`` (a line per call, written when the
  call starts, which is also the tests' signal that the call is under way), and take ``TOOL_S``:
  ``lookup`` says a repeated call is harmless (``idempotent``), ``send_note`` does not;
- a hold on the terminal write: while ``CHAOS_DIR/hold-terminal`` exists, a run's terminal write waits
  there (after writing ``CHAOS_DIR/terminal-held``), so a kill lands during it.

Everything else (settings, profiles, leases, recovery) is the product's, from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import uvicorn

from agent_service.app import create_app
from agent_service.repository import RunRepository
from agent_service.settings import AgentServiceSettings
from agent_service.tools.base import Tool, ToolContext
from agent_service.tools.registry import ToolRegistry
from shared.llm.base import LLMDone, LLMEvent, LLMMessage, TextDelta, ToolCall, ToolSpec
from shared.logging import configure_logging
from shared.serving import ServiceServer
from tests.support.models import ScriptedModelBase

PRE = "Let me look that value up first. "
MID = "The value is 42, so now I send the note to the team. "
FINAL_WORDS = [f"Final{i:02d}" for i in range(30)]
KNOWN = "The note was sent. "
UNKNOWN = "I could not confirm that the note was sent. "
PROFILES = """
profiles:
  - name: default
    description: the durable-run chaos profile
    system_prompt: You look the value up, send the note, then answer.
    tools: [lookup, send_note]
    max_steps: 6
    max_tokens: 512
"""


def final_answer(note_known: bool) -> str:
    return (KNOWN if note_known else UNKNOWN) + " ".join(FINAL_WORDS) + "."


def answer(note_known: bool) -> str:
    """The run's whole answer: what every client must show, each passage once."""
    return PRE + MID + final_answer(note_known)


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + " " for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class StepModel(ScriptedModelBase):
    name = "chaos-steps"

    def __init__(self, chunk_s: float, between_s: float) -> None:
        self.chunk_s = chunk_s
        self.between_s = between_s

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        results = [m for m in messages if m.role == "tool"]
        if not results:
            async for event in self._say(PRE):
                yield event
            yield ToolCall(id="call-lookup", name="lookup", arguments={"key": "value"})
        elif len(results) == 1:
            await asyncio.sleep(self.between_s)  # the model's time to first token: a gap between two steps
            async for event in self._say(MID):
                yield event
            yield ToolCall(id="call-note", name="send_note", arguments={"to": "team"})
        else:
            known = "unknown" not in results[-1].content
            async for event in self._say(final_answer(known)):
                yield event
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=5)

    async def _say(self, text: str) -> AsyncIterator[LLMEvent]:
        for word in _words(text):
            await asyncio.sleep(self.chunk_s)  # the pace of a real model
            yield TextDelta(word)


class _CountedTool(Tool):
    description: ClassVar[str] = "a test tool"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, folder: Path, seconds: float) -> None:
        self.calls = folder / f"{self.name}.calls"
        self.seconds = seconds

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        # The effect, and the tests' signal that the call is under way: a line per call, made durable
        # before the call goes on (a kill right after must find it).
        await asyncio.to_thread(self._count, ctx.run_id)
        await asyncio.sleep(self.seconds)  # a slow tool: a kill lands inside it
        return self.result

    def _count(self, run_id: str) -> None:
        with open(self.calls, "a") as out:
            out.write(f"{run_id}\n")


class Lookup(_CountedTool):
    name: ClassVar[str] = "lookup"
    idempotent: ClassVar[bool] = True
    result: ClassVar[dict[str, Any]] = {"value": 42}


class SendNote(_CountedTool):
    name: ClassVar[str] = "send_note"
    idempotent: ClassVar[bool] = False
    result: ClassVar[dict[str, Any]] = {"sent": True}


def hold_terminal_writes(folder: Path) -> None:
    """While ``folder/hold-terminal`` exists, each run's terminal write waits before its statement."""
    end = RunRepository.end

    async def held_end(self, *args: Any, **kwargs: Any) -> bool:
        if (folder / "hold-terminal").exists():
            (folder / "terminal-held").write_text("held")
            while (folder / "hold-terminal").exists():
                await asyncio.sleep(0.05)  # until the test lets it go (or kills the process)
        return await end(self, *args, **kwargs)

    RunRepository.end = held_end  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    folder = Path(os.environ["CHAOS_DIR"])
    settings = AgentServiceSettings()
    configure_logging("agent_service", settings.log_level)
    hold_terminal_writes(folder)
    tool_s = float(os.environ.get("TOOL_S", "1.5"))
    model = StepModel(chunk_s=float(os.environ.get("CHUNK_S", "0.05")),
                      between_s=float(os.environ.get("BETWEEN_S", "1.0")))
    app = create_app(settings, provider=model, tools=ToolRegistry([Lookup(folder, tool_s), SendNote(folder, tool_s)]))
    server = ServiceServer(uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False),
                           app.state.shutdown)
    server.run()


if __name__ == "__main__":
    main()
