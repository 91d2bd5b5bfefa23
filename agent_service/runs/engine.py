"""The ReAct loop: model → tool calls → results back to the model → … → answer.

The engine knows nothing of HTTP or the database. It emits non-terminal events (THOUGHT,
TOOL_START, ARTIFACT, TOOL_END, ANSWER_CHUNK) through ``emit`` and returns how the run ended
(``Completed``, ``Paused`` for ASK_USER, ``Failed``); the run manager turns that outcome into the
terminal event and the session's new state. All it needs to continue later lives in ``RunState``
(``runs.state``), which it hands to ``ctx.steps`` at the end of each step (a model turn that called
tools, each call's result): the checkpoint a run whose process died continues from.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from agent_service.hooks.base import (
    AfterModelCall,
    AfterTool,
    AnswerChunk,
    BeforeModelCall,
    BeforeTool,
    HookPoint,
    RunEnd,
    RunInfo,
    RunStart,
)
from agent_service.hooks.runner import HookRunner, no_hooks
from agent_service.memory.recall import LongTermMemory, memory_message
from agent_service.memory.store import Owner
from agent_service.metrics import AgentMetrics
from agent_service.runs.context_window import ContextWindow
from agent_service.runs.model_reply import ModelReply
from agent_service.runs.state import (
    Completed,
    Failed,
    Outcome,
    Paused,
    Resume,
    RunContext,
    RunState,
    as_text,
    close_pending_calls,
)
from agent_service.tools.ask_user import ASK_USER_TOOL_NAME, validate_question
from agent_service.tools.base import InputRequired, Tool, ToolContext, ToolError, ToolOutput, UserReply
from agent_service.tools.reply import NOT_RUN, REPLY_TOOL_NAME, SENT, validate_reply
from shared.fastpath.coalesce import aclose_stream, coalesce
from shared.fastpath.fair_share import fair_share
from shared.llm.base import (
    DELTA_TYPES,
    CompletionOptions,
    LLMError,
    LLMMessage,
    LLMProvider,
    TextDelta,
    ToolCall,
)
from shared.protocol import (
    ArtifactData,
    AskUserKind,
    ErrorCode,
    EventType,
    PendingQuestion,
    ToolEndData,
    ToolStartData,
    WaitingData,
    utcnow,
)
from shared.rate_limit import RateLimited, RateLimiter, Wait
from shared.tokens import count_messages_tokens, count_tokens
from shared.tracing import NO_TRACING, Tracing, TracingOff

log = logging.getLogger(__name__)

REFUSED_RESULT = {"error": "The user refused this tool call. Do not retry it; continue without it."}
# A call that repeats an effect is made only once its TOOL_START is durable (a crash then leaves no
# doubt whether it may have run); when that write fails, it is not made.
NOT_RECORDED = "the call was not made: the agent could not record it (its database is unavailable)"


class ToolLookup(Protocol):
    """The tool registry as the engine sees it: ``get`` returns the tool, or None or raises
    ``LookupError`` for a name it does not have."""

    def get(self, name: str) -> Tool | None: ...


def find_tool(tools: ToolLookup, name: str) -> Tool | None:
    try:
        return tools.get(name)
    except LookupError:
        return None


Emit = Callable[[EventType, BaseModel], Any]


class ReActEngine:
    def __init__(
        self, provider: LLMProvider, tools: ToolLookup, metrics: AgentMetrics, *, ask_user_timeout_s: float,
        tool_timeout_s: float = 30.0, max_tool_result_chars: int = 16_000, hooks: HookRunner | None = None,
        limiter: RateLimiter | None = None, default_model: str | None = None, memory: LongTermMemory | None = None,
        tracing: Tracing | TracingOff = NO_TRACING, stream_coalesce_ms: float = 0.0,
    ) -> None:
        self.provider = provider
        # The model's deltas that arrive within this many ms go out as one ANSWER_CHUNK (0: one each).
        self.stream_coalesce_ms = stream_coalesce_ms
        self.tracing = tracing
        self.tools = tools
        self.metrics = metrics
        self.hooks = hooks if hooks is not None else no_hooks(metrics)
        self.limiter = limiter
        # The model a profile without one is served by: the budget it draws on.
        self.default_model = default_model or provider.name
        self.memory = memory
        self.ask_user_timeout = timedelta(seconds=ask_user_timeout_s)
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_result_chars = max_tool_result_chars

    async def run(
        self, ctx: RunContext, state: RunState, emit: Emit, resume: Resume | None = None,
        ready: Awaitable[None] | None = None,
    ) -> Outcome:
        """Run until an answer, a question or a failure. ``ready``, when given, is awaited before the
        first event is emitted (the caller's bookkeeping may still be under way when the first
        model call starts). The ``run_start`` and ``run_end`` hooks are called around it; a
        cancelled run ends with ERROR CANCELLED for them too."""
        run = run_info(ctx)
        started = time.perf_counter()
        if self.hooks.wants(HookPoint.RUN_START):
            await self.hooks.call(HookPoint.RUN_START, RunStart(run, _last_user_message(state), resume is not None))
        outcome: Outcome = Failed(ErrorCode.INTERNAL, "the run failed unexpectedly")
        try:
            if self.memory is not None:
                await self._recall(ctx, state)
            outcome = await self._run(ctx, state, emit, resume, ready)
            return outcome
        except asyncio.CancelledError:
            outcome = Failed(ErrorCode.CANCELLED, "the run was cancelled")
            raise
        finally:
            if self.hooks.wants(HookPoint.RUN_END):
                await self.hooks.call(HookPoint.RUN_END, _run_end(run, outcome, state, time.perf_counter() - started))

    def remember(self, ctx: RunContext, state: RunState, outcome: Outcome) -> None:
        """Once a completed run's terminal event is written: its turn goes to long-term memory, in
        the background (``memory.writer``); the run waits for none of it."""
        if self.memory is not None and isinstance(outcome, Completed):
            self.memory.remember_later(_owner(ctx), _last_user_message(state), outcome.answer, ctx.session_id)

    async def _recall(self, ctx: RunContext, state: RunState) -> None:
        """What the user told the agent before, relevant to this message, into the run's prompts."""
        assert self.memory is not None
        recalled = memory_message(await self.memory.recall(_owner(ctx), _last_user_message(state)))
        state.context = [recalled] if recalled is not None else []

    async def _run(
        self, ctx: RunContext, state: RunState, emit: Emit, resume: Resume | None, ready: Awaitable[None] | None,
    ) -> Outcome:
        answer = state.answer
        if resume is not None and state.pending_calls:
            paused = await self._resume_call(ctx, state, resume, emit)
            if paused is not None:
                return paused
            ctx.steps.ended(state)
        ended = await self._run_pending(ctx, state, emit, answer)
        if ended is not None:
            return ended

        profile = ctx.profile
        specs = [tool.spec() for name in profile.tools if (tool := find_tool(self.tools, name)) is not None]
        options = CompletionOptions(model=profile.model, max_tokens=profile.max_tokens, temperature=profile.temperature)
        window = ContextWindow(profile, specs)
        while state.steps < profile.max_steps:
            state.steps += 1
            messages = await window.prompt(state)
            if isinstance(messages, Failed):
                return messages
            try:
                text, calls = await self._model_turn(ctx, state, messages, specs, options, emit, answer, ready)
            except LLMError as exc:
                code = ErrorCode.LLM_UNAVAILABLE if exc.retryable else ErrorCode.LLM_ERROR
                log.warning("model call failed", extra={"error_type": type(exc).__name__, "code": code.value})
                return Failed(code, f"the language model failed: {exc}")
            except RateLimited as exc:
                return Failed(ErrorCode.RATE_LIMITED, f"{exc.reason}: retry in {exc.retry_after_s:.0f} s",
                              retry_after_s=round(exc.retry_after_s, 3))
            ready = None
            state.transcript.append(LLMMessage(role="assistant", content=text, tool_calls=tuple(calls)))
            if not calls:
                return Completed(answer="".join(answer), usage=state.usage)
            state.pending_calls = list(calls)
            ctx.steps.ended(state)
            ended = await self._run_pending(ctx, state, emit, answer)
            if ended is not None:
                return ended
        return Failed(
            ErrorCode.MAX_STEPS_EXCEEDED, f"no answer within the profile's limit of {profile.max_steps} steps"
        )

    async def _model_turn(
        self, ctx: RunContext, state: RunState, messages: list[LLMMessage], specs, options: CompletionOptions,
        emit: Emit, answer: list[str], ready: Awaitable[None] | None = None,
    ) -> tuple[str, list[ToolCall]]:
        """One model call: its prompt through the hooks, room in the rate limits, its reply streamed,
        the hooks told, its usage counted and recorded against the limits."""
        run = run_info(ctx)
        # The prompt of this call: hooks may change it; the run's transcript stays as it is.
        prompt = BeforeModelCall(run, state.steps, messages, options)
        if self.hooks.wants(HookPoint.BEFORE_MODEL_CALL):
            await self.hooks.call(HookPoint.BEFORE_MODEL_CALL, prompt)
        model = prompt.options.model or self.default_model
        if self.limiter is not None:
            await self._take_budget(run, model, prompt.messages, emit, ready)
        started = time.perf_counter()
        reply = await self._stream_reply(run, state.steps, prompt, specs, emit, ready)
        answer.extend(reply.text)
        if self.hooks.wants(HookPoint.AFTER_MODEL_CALL):
            await self.hooks.call(
                HookPoint.AFTER_MODEL_CALL,
                AfterModelCall(run, state.steps, reply.content, list(reply.calls), time.perf_counter() - started),
            )
        completion = await _count_usage(state, prompt.messages, reply)
        if self.limiter is not None:
            await self.limiter.record_output(run.org_id, model, completion)
        return reply.content, reply.calls

    async def _stream_reply(
        self, run: RunInfo, step: int, prompt: BeforeModelCall, specs, emit: Emit, ready: Awaitable[None] | None,
    ) -> ModelReply:
        """The model's reply, each event taken as it arrives; nothing is emitted before ``ready`` (the
        run's claim may still be committing while the model starts: ``early_start``)."""
        reply = ModelReply(emit, step, self._chunk_hooks(run))
        started = time.perf_counter()
        # What arrived together is taken as one: one ANSWER_CHUNK, one seq, one write, one SSE message.
        stream = coalesce(self.provider.stream(prompt.messages, tools=specs, options=prompt.options),
                          self.stream_coalesce_ms, DELTA_TYPES)
        try:
            # fair_share pauses for other runs after an event is out, never before.
            async for event in fair_share(stream):
                if started is not None:
                    self.metrics.llm_ttft.observe(time.perf_counter() - started)
                    started = None
                    if ready is not None:
                        await ready
                await reply.take(event)
        finally:
            await aclose_stream(stream)
        reply.end_reasoning()
        return reply

    def _chunk_hooks(self, run: RunInfo) -> Callable[[str], Awaitable[None]] | None:
        """What tells the ``answer_chunk`` hooks of each chunk, when any are loaded."""
        if not self.hooks.wants(HookPoint.ANSWER_CHUNK):
            return None

        async def on_chunk(text: str) -> None:
            await self.hooks.call(HookPoint.ANSWER_CHUNK, AnswerChunk(run, text))

        return on_chunk

    async def _take_budget(
        self, run: RunInfo, model: str, messages: list[LLMMessage], emit: Emit, ready: Awaitable[None] | None,
    ) -> None:
        """Wait for room in the organisation's rate limits for this call, saying so with WAITING events."""
        assert self.limiter is not None

        async def on_wait(wait: Wait) -> None:
            if ready is not None:
                await ready  # nothing is emitted before the run's claim committed
            self.metrics.rate_limit_waits[wait.dimension.value].inc()
            emit(EventType.WAITING, WaitingData(reason=wait.reason, wait_s=wait.wait_s, limit=wait.dimension.value))

        async def input_tokens() -> int:
            return await asyncio.to_thread(count_messages_tokens, [(m.role, m.content) for m in messages])

        await self.limiter.acquire(run.org_id, model, input_tokens, on_wait)

    async def _run_pending(
        self, ctx: RunContext, state: RunState, emit: Emit, answer: list[str],
    ) -> Paused | Completed | None:
        """Execute the pending tool calls in order; stop at one that needs the user, or at a reply."""
        while state.pending_calls:
            call = state.pending_calls[0]
            if call.name == REPLY_TOOL_NAME and call.name in ctx.profile.tools:
                state.pending_calls.pop(0)
                replied = await self._reply(ctx, state, call, emit, answer)
                if replied is not None:
                    return replied
                continue
            if call.name == ASK_USER_TOOL_NAME and call.name in ctx.profile.tools:
                try:
                    question = validate_question(call.arguments)
                except ToolError as exc:
                    # A malformed question goes back to the model like any tool error.
                    state.pending_calls.pop(0)
                    self._tool_result(state, call, {"error": str(exc)})
                    ctx.steps.ended(state)
                    continue
                return self._pause(call, AskUserKind.QUESTION, question)
            if call.name in ctx.profile.approval_required_tools:
                return self._pause(
                    call, AskUserKind.APPROVAL, f"May I run {call.name} with {as_text(call.arguments)}?",
                    tool=call.name, args=call.arguments,
                )
            state.pending_calls.pop(0)
            paused = await self._execute(ctx, state, call, emit)
            if paused is not None:
                return paused
        return None

    async def _resume_call(self, ctx: RunContext, state: RunState, resume: Resume, emit: Emit) -> Paused | None:
        """The paused call takes the user's reply: a tool's own question is answered (the call goes
        on), an approval runs or refuses it, an ``ask_user`` question's answer is its result."""
        call = state.pending_calls.pop(0)
        waiting, state.tool_input = state.tool_input, None
        if waiting is not None and waiting.get("call_id") == call.id:
            reply = UserReply(resume.text, declined=resume.declined)
            return await self._execute(ctx, state, call, emit, answered=(waiting.get("state") or {}, reply))
        if resume.kind is AskUserKind.APPROVAL:
            if resume.approved:
                return await self._execute(ctx, state, call, emit)
            self._tool_result(state, call, REFUSED_RESULT)
        else:
            self._tool_result(state, call, {"answer": resume.text})
        return None

    async def _reply(
        self, ctx: RunContext, state: RunState, call: ToolCall, emit: Emit, answer: list[str],
    ) -> Completed | None:
        """The model's direct reply: its text is the answer, streamed as any answer is, and the run
        ends with it (None: a malformed reply, which goes back to the model like any tool error)."""
        try:
            text = validate_reply(call.arguments)
        except ToolError as exc:
            self._tool_result(state, call, {"error": str(exc)})
            return None
        reply = ModelReply(emit, state.steps, self._chunk_hooks(run_info(ctx)))
        await reply.take(TextDelta(text))
        answer.extend(reply.text)
        self._tool_result(state, call, SENT)
        # Calls the model made after its reply in the same turn get a result, so the transcript
        # stays valid for the session's next run.
        close_pending_calls(state, NOT_RUN)
        return Completed(answer="".join(answer), usage=state.usage, direct=True)

    def _pause(
        self, call: ToolCall, kind: AskUserKind, question: str, tool: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> Paused:
        expires_at: datetime = utcnow() + self.ask_user_timeout
        pending = PendingQuestion(
            question_id=uuid.uuid4().hex, question=question, expires_at=expires_at, kind=kind, tool=tool, args=args
        )
        return Paused(question=pending, call_id=call.id)

    async def _execute(
        self, ctx: RunContext, state: RunState, call: ToolCall, emit: Emit,
        answered: tuple[dict[str, Any], UserReply] | None = None,
    ) -> Paused | None:
        """Run one tool call between its TOOL_START and TOOL_END; a ``before_tool`` hook may refuse
        it, which the model reads as the tool's error. Its result goes into the transcript and the
        step ends with the TOOL_END, with no wait in between: the checkpoint is written with it. A tool
        that asks the user something pauses the run (its TOOL_END comes with the run that takes the
        answer: ``answered``, the tool's state and the reply; the hooks let that call through already)."""
        run = run_info(ctx)
        tool = self._offered(ctx, call.name)
        server = tool.server if tool is not None else None
        before = BeforeTool(run, call.id, call.name, dict(call.arguments), server=server)
        if answered is None and self.hooks.wants(HookPoint.BEFORE_TOOL):
            await self.hooks.call(HookPoint.BEFORE_TOOL, before)
        emit(EventType.TOOL_START, ToolStartData(call_id=call.id, tool=call.name, args=call.arguments))
        if answered is None:
            state.usage.tool_calls += 1
        started = time.perf_counter()
        artifacts: tuple[ArtifactData, ...] = ()
        if before.refusal is not None:
            ok, result, error = False, None, before.refusal
        elif not (tool is None or tool.idempotent or await ctx.steps.effect_ahead()):
            ok, result, error = False, None, NOT_RECORDED
        else:
            with self.tracing.tool(call.name, call.id, server=server) as span:
                invoked = await self._invoke(ctx, call, tool, answered)
                if isinstance(invoked, InputRequired):
                    return self._ask_for_tool(state, call, invoked)
                ok, result, error = invoked
                if not ok:
                    span.set_attribute("error.type", "tool_error")
        if isinstance(result, ToolOutput):
            result, artifacts = result.result, result.artifacts
        duration = time.perf_counter() - started
        self.metrics.tool_latency.labels(call.name).observe(duration)
        for artifact in artifacts:
            # Made by this call: between its start and its end.
            behind = emit(EventType.ARTIFACT, artifact.model_copy(update={"call_id": call.id}))
            if behind is not None:
                await behind
        emit(
            EventType.TOOL_END,
            ToolEndData(
                call_id=call.id, tool=call.name, ok=ok, result=result if ok else None, error=error,
                duration_ms=round(duration * 1000, 3),
            ),
        )
        self._tool_result(state, call, result if ok else {"error": error})
        ctx.steps.ended(state)
        if self.hooks.wants(HookPoint.AFTER_TOOL):
            await self.hooks.call(
                HookPoint.AFTER_TOOL,
                AfterTool(run, call.id, call.name, call.arguments, ok, result, error, duration, server=server),
            )
        return None

    def _offered(self, ctx: RunContext, name: str) -> Tool | None:
        return find_tool(self.tools, name) if name in ctx.profile.tools else None

    def _ask_for_tool(self, state: RunState, call: ToolCall, request: InputRequired) -> Paused:
        """The call waits for the user: it stays first among the pending calls, with its tool's state."""
        state.tool_input = {"call_id": call.id, "state": request.state}
        state.pending_calls.insert(0, call)
        return self._pause(call, AskUserKind.QUESTION, request.question, tool=call.name)

    async def _invoke(
        self, ctx: RunContext, call: ToolCall, tool: Tool | None, answered: tuple[dict[str, Any], UserReply] | None,
    ) -> tuple[bool, Any, str | None] | InputRequired:
        """``(ok, result, error)`` of running the tool the call names, or its question for the user."""
        if tool is None:
            return False, None, f"unknown tool {call.name!r}; available: {', '.join(ctx.profile.tools) or 'none'}"
        timeout = tool.timeout_s or self.tool_timeout_s
        tool_ctx = ToolContext(ctx.session_id, ctx.run_id, ctx.user_context)
        work = (tool.run(call.arguments, tool_ctx) if answered is None
                else tool.resume(call.arguments, answered[0], answered[1], tool_ctx))
        try:
            return True, await asyncio.wait_for(work, timeout), None
        except InputRequired as request:
            return request
        except ToolError as exc:
            return False, None, str(exc)
        except TimeoutError:
            return False, None, f"{call.name} did not finish within {timeout:g} s"
        except Exception:
            log.exception("tool failed", extra={"tool": call.name})
            return False, None, f"{call.name} failed with an internal error"

    def _tool_result(self, state: RunState, call: ToolCall, result: Any) -> None:
        content = as_text(result)
        if len(content) > self.max_tool_result_chars:
            content = content[: self.max_tool_result_chars] + " …[truncated]"
        state.transcript.append(LLMMessage(role="tool", content=content, tool_call_id=call.id, name=call.name))


async def _count_usage(state: RunState, prompt: list[LLMMessage], reply: ModelReply) -> int:
    """Add the call to the run's usage (the provider's counts, or ours when it sends none); the
    completion tokens it used."""
    done = reply.done
    state.usage.llm_calls += 1
    if done is not None and done.prompt_tokens:
        state.usage.prompt_tokens += done.prompt_tokens
    else:
        state.usage.prompt_tokens += await asyncio.to_thread(count_messages_tokens, [(m.role, m.content) for m in prompt])
    completion = done.completion_tokens if done is not None and done.completion_tokens else count_tokens(reply.content)
    state.usage.completion_tokens += completion
    state.usage.total_tokens = state.usage.prompt_tokens + state.usage.completion_tokens
    return completion


def run_info(ctx: RunContext) -> RunInfo:
    user = ctx.user_context
    return RunInfo(ctx.session_id, ctx.run_id, ctx.profile.name, user.user_id, user.org_id)


def _owner(ctx: RunContext) -> Owner:
    return Owner(user_id=ctx.user_context.user_id, org_id=ctx.user_context.org_id)


def _last_user_message(state: RunState) -> str:
    return next((m.content for m in reversed(state.transcript) if m.role == "user"), "")


def _run_end(run: RunInfo, outcome: Outcome, state: RunState, duration_s: float) -> RunEnd:
    if isinstance(outcome, Completed):
        return RunEnd(run, EventType.COMPLETE.value, None, state.usage, duration_s)
    if isinstance(outcome, Paused):
        return RunEnd(run, EventType.ASK_USER.value, None, state.usage, duration_s)
    return RunEnd(run, EventType.ERROR.value, outcome.code.value, state.usage, duration_s)

