"""``TracedProvider``: each model call one span, named and described by the GenAI semantic conventions.

``chat {model}`` (CLIENT) with ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model`` (and ``max_tokens``, ``temperature`` when set), ``gen_ai.request.stream``,
``gen_ai.conversation.id`` (the chat's conversation, or the Agent Service's session, whose log context
the call runs in), ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
``gen_ai.response.finish_reasons`` and ``gen_ai.response.time_to_first_chunk`` (seconds from the
request to the first chunk); the stream is counted (``taskforce.stream.events``), not traced per chunk. The
prompt and the answer are recorded (``gen_ai.input.messages``, ``gen_ai.output.messages``) only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true: they are users' data.

The request goes out on the stream's first step, made under the span, so the model server receives
this span as the ``traceparent`` of its request (through ``TracedTransport``); the later steps run
in the caller's context, whatever it does between chunks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    LLMProvider,
    TextDelta,
    ToolSpec,
)
from shared.logging import conversation_id_var, session_id_var
from shared.tracing.core import Tracing, TracingOff, gen_ai_provider_name

__all__ = ["TracedProvider", "traced_provider"]


def traced_provider(tracing: Tracing | TracingOff, inner: LLMProvider, default_model: str) -> LLMProvider:
    """``inner`` with a GenAI span per call when tracing is on; ``inner`` itself when off."""
    return TracedProvider(inner, tracing, default_model) if isinstance(tracing, Tracing) else inner  # type: ignore[return-value]


class TracedProvider:
    def __init__(self, inner: LLMProvider, tracing: Tracing, default_model: str) -> None:
        self.inner = inner
        self.name = inner.name
        self._tracer = tracing.tracer
        self._capture = tracing.capture_content
        self._default_model = default_model
        self._provider_name = gen_ai_provider_name(inner.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the provider's own parts (slots...) stay reachable

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _start(self, messages: Sequence[LLMMessage], options: CompletionOptions) -> Any:
        model = options.model or self._default_model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self._provider_name,
            "gen_ai.request.model": model, "gen_ai.request.stream": True,  # every call here streams
        }
        conversation = conversation_id_var.get() or session_id_var.get()
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        if options.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = options.max_tokens
        if options.temperature is not None:
            attributes["gen_ai.request.temperature"] = options.temperature
        if self._capture:
            attributes["gen_ai.input.messages"] = orjson.dumps([m.to_dict() for m in messages]).decode()
        return self._tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        span = self._start(messages, options)
        inner = self.inner.stream(messages, tools=tools, options=options)
        started, count, first_at = time.perf_counter(), 0, None
        answer: list[str] = []
        try:
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                event = await anext(inner)
            finally:
                otel_context.detach(token)
            while True:
                if first_at is None:
                    first_at = time.perf_counter()
                count += 1
                if isinstance(event, LLMDone):
                    _describe_end(span, event)
                elif self._capture and isinstance(event, TextDelta):
                    answer.append(event.text)
                yield event
                event = await anext(inner)
        except StopAsyncIteration:
            pass
        except GeneratorExit:
            raise  # the caller stopped reading (a cancel, a stop): not a failure of the call
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            await _close(inner)
            span.set_attribute("taskforce.stream.events", count)
            if first_at is not None:
                span.set_attribute("gen_ai.response.time_to_first_chunk", round(first_at - started, 6))
            if self._capture and answer:
                span.set_attribute("gen_ai.output.messages", orjson.dumps(
                    [{"role": "assistant", "content": "".join(answer)}]).decode())
            span.end()


def _describe_end(span: Any, done: LLMDone) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", done.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", done.completion_tokens)
    if done.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [done.finish_reason])
    if done.response_model:
        span.set_attribute("gen_ai.response.model", done.response_model)
    else:
        span.set_attribute("gen_ai.response.model", span.attributes.get("gen_ai.request.model", ""))


async def _close(inner: Any) -> None:
    close = getattr(inner, "aclose", None)
    if close is not None:
        await close()
