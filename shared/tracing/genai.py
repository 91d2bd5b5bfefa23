"""``TracedProvider``: each model call one span, named and described by the GenAI semantic conventions.

``chat {model}`` (CLIENT) with ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model`` (and ``max_tokens``, ``temperature`` when set), ``gen_ai.response.model``,
``gen_ai.usage.input_tokens``/``output_tokens`` and ``gen_ai.response.finish_reasons``; the stream is
counted (``taskforce.stream.events``, ``gen_ai``'s time to first chunk), not traced per chunk. The
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
from shared.tracing.core import Tracing

__all__ = ["TracedProvider"]

# gen_ai.provider.name: the conventions' value for OpenAI-compatible endpoints; ours for the built-in model.
_PROVIDER_NAMES = {"openai": "openai", "builtin": "taskforce.builtin"}


class TracedProvider:
    def __init__(self, inner: LLMProvider, tracing: Tracing, default_model: str) -> None:
        self.inner = inner
        self.name = inner.name
        self._tracer = tracing.tracer
        self._capture = tracing.capture_content
        self._default_model = default_model
        self._provider_name = _PROVIDER_NAMES.get(inner.name, inner.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the provider's own parts (slots...) stay reachable

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _start(self, messages: Sequence[LLMMessage], options: CompletionOptions) -> Any:
        model = options.model or self._default_model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self._provider_name,
            "gen_ai.request.model": model,
        }
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
                span.set_attribute("taskforce.stream.first_event_ms", round((first_at - started) * 1000, 3))
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
