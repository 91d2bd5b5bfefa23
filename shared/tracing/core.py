"""``Tracing``: what the services call to trace, and ``NO_TRACING``, what they call when it is off.

Both have the same methods; the domain holds one or the other from start-up on and never asks which.
The calls are per turn, run, model call and tool call, never per event: ``NO_TRACING``'s spans are
one shared ``nullcontext`` holding a non-recording span, and its other methods return at once.

The tracer provider is the service's own (``app.state.tracing``), not OpenTelemetry's global one: a
test process builds many apps, and each worker process builds its own.

The instrumented parts (``http_client``, ``genai``, ``db``) are built on this module, never the other
way round: each has one function that wraps its part when tracing is on and returns it as it is when
off, called once at start-up by the lifespans.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["FLUSH_ON_SHUTDOWN_S", "NO_TRACING", "Tracing", "TracingOff", "gen_ai_provider_name", "links_to"]

_W3C = TraceContextTextMapPropagator()
_NULL_SPAN = nullcontext(trace.INVALID_SPAN)
# On shutdown the spans still queued get one short try: a trace backend that is down or does not answer costs
# the stop at most this (the exporter's own timeout, OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default, waits
# through its retries, which is right for a running service and wrong for one stopping).
FLUSH_ON_SHUTDOWN_S = 1.0
# gen_ai.provider.name: the conventions' value for OpenAI-compatible endpoints; ours for the built-in model.
_PROVIDER_NAMES = {"openai": "openai", "builtin": "taskforce.builtin"}


def gen_ai_provider_name(provider: str) -> str:
    """The ``gen_ai.provider.name`` of an LLM provider of ``shared.llm`` (its ``name``)."""
    return _PROVIDER_NAMES.get(provider, provider)


def _context_of(traceparent: str | None) -> otel_context.Context | None:
    """The context a ``traceparent`` names, or None when it is missing or malformed."""
    if not traceparent or not isinstance(traceparent, str) or len(traceparent) > 128:
        return None
    extracted = _W3C.extract({"traceparent": traceparent})
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def links_to(*traceparents: str | None) -> list[Link]:
    """Links to the spans these stored ``traceparent`` values name (the invalid ones left out)."""
    links = []
    for traceparent in traceparents:
        found = _context_of(traceparent)
        if found is not None:
            links.append(Link(trace.get_current_span(found).get_span_context()))
    return links


def recording() -> bool:
    """Whether the current context is inside a span that records: only then are database and
    outbound HTTP spans made (background loops run outside any span)."""
    return trace.get_current_span().is_recording()


class TracingOff:
    """Tracing not configured: every method does nothing, at once."""

    enabled = False
    capture_content = False

    def span(self, *_: Any, **__: Any) -> AbstractContextManager[Span]:
        return _NULL_SPAN

    turn = run = tool = inbound_message = span

    def traceparent(self) -> str | None:
        return None

    def exemplar(self) -> dict[str, str] | None:
        return None

    def counted(self, events: Any, name: str) -> Any:
        return events

    async def aclose(self, timeout_s: float) -> None:
        return None


NO_TRACING = TracingOff()


class Tracing:
    """Tracing on, with the process's tracer provider (``config.build_tracing``)."""

    enabled = True

    def __init__(
        self, provider: Any, *, trust_client_context: bool, capture_content: bool,
        stop_export: Callable[[], None] = lambda: None,
    ) -> None:
        self.tracer_provider = provider
        # Makes the exporter give up (an export retrying returns, later ones are dropped): the bound of aclose.
        self._stop_export = stop_export
        self.tracer = provider.get_tracer("taskforce")
        # Whether a caller's traceparent is honoured (its trace continued) or only linked to.
        self.trust_client_context = trust_client_context
        # Prompt and answer text on model spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
        self.capture_content = capture_content

    # -- spans ------------------------------------------------------------------------------------

    def span(
        self, name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] = (), parent: otel_context.Context | None = None,
    ) -> AbstractContextManager[Span]:
        """A span made current for the block; an exception escaping it marks it failed."""
        return self.tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes, links=links)

    def turn(self, turn_id: str, *, linked: str | None = None, takeover: bool = False) -> AbstractContextManager[Span]:
        """The reply to one chat message (agent or direct), under the message's span; a turn taken
        over, or answered again, also links to the trace of its message (``linked``)."""
        attributes = {"taskforce.turn.id": turn_id, "taskforce.turn.takeover": takeover}
        return self.span("chat turn", attributes=attributes, links=links_to(linked))

    def run(
        self, session_id: str, run_id: str, profile: str, *, provider: str, model: str, linked: str | None = None,
    ) -> AbstractContextManager[Span]:
        """An agent run (GenAI ``invoke_agent``), under the execute request that started it: it
        goes on after that request ends. A resumed run links to the run it continues. ``provider``
        is the LLM provider's name (``shared.llm``), ``model`` the one the run's profile calls."""
        return self.span(f"invoke_agent {profile}", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": profile,
            "gen_ai.provider.name": gen_ai_provider_name(provider), "gen_ai.request.model": model,
            "gen_ai.conversation.id": session_id, "taskforce.run.id": run_id,
        }, links=links_to(linked))

    def tool(self, name: str, call_id: str, *, server: str | None = None) -> AbstractContextManager[Span]:
        """One tool call (GenAI ``execute_tool``); a tool of an MCP server names it (``mcp.server.name``)."""
        attributes = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        }
        if server is not None:
            attributes["mcp.server.name"] = server
        return self.span(f"execute_tool {name}", attributes=attributes)

    @contextmanager
    def inbound_message(
        self, name: str, *, traceparent: str | None, linked: Sequence[Link] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> Iterator[Span]:
        """A message that arrives on a long-lived connection (a WebSocket): a trace of its own, not
        a part of the connection's; the client's ``traceparent`` is its parent when client contexts
        are trusted, else only linked to."""
        client = _context_of(traceparent)
        links = list(linked)
        parent = otel_context.Context()  # a new trace, whatever the connection's context holds
        if client is not None and self.trust_client_context:
            parent = client
        elif client is not None:
            links.append(Link(trace.get_current_span(client).get_span_context()))
        with self.span(name, kind=SpanKind.SERVER, parent=parent, links=links, attributes=attributes) as span:
            yield span

    # -- propagation, exemplars -------------------------------------------------------------------

    def traceparent(self) -> str | None:
        """The current span as a W3C ``traceparent``, to store with a turn or a run."""
        carrier: dict[str, str] = {}
        _W3C.inject(carrier)
        return carrier.get("traceparent")

    @staticmethod
    def inject(headers: MutableMapping[str, str], span: Span) -> None:
        _W3C.inject(headers, context=trace.set_span_in_context(span))

    @staticmethod
    def extract(headers: Mapping[str, str]) -> otel_context.Context:
        return _W3C.extract(headers)

    def exemplar(self) -> dict[str, str] | None:
        """The current span as a Prometheus exemplar (shown in OpenMetrics output)."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid or not context.trace_flags.sampled:
            return None
        return {"trace_id": trace.format_trace_id(context.trace_id), "span_id": trace.format_span_id(context.span_id)}

    def counted(self, events: Any, name: str) -> Any:
        """``events`` (an async iterator) read under a span of their own that says how many there
        were and when the first came: one span per stream, not per event."""
        return _counted(self, events, name)

    # -- shutdown ---------------------------------------------------------------------------------

    async def aclose(self, timeout_s: float) -> None:
        """Export what is left and stop, with one short try: within ``FLUSH_ON_SHUTDOWN_S``, or
        ``timeout_s`` (what is left of the shutdown's grace) when less. Past it the exporter gives up,
        retries included: a trace backend that is down or does not answer never holds the stop up."""
        budget_s = max(min(timeout_s, FLUSH_ON_SHUTDOWN_S), 0.1)
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def stop() -> None:
            give_up = threading.Timer(budget_s, self._stop_export)
            give_up.daemon = True
            give_up.start()
            try:
                self.tracer_provider.shutdown()  # exports what is queued, then stops the exporter
            finally:
                give_up.cancel()
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        # A daemon thread: an export blocked in a connect that never answers does not keep the process up.
        threading.Thread(target=stop, name="tracing-flush", daemon=True).start()
        try:
            await asyncio.wait_for(done, timeout=budget_s + 0.5)
        except TimeoutError:
            pass


async def _counted(tracing: Tracing, events: Any, name: str) -> Any:
    # Not made current: the consumer's own work between events stays under its own span, and a
    # generator closed late (by the garbage collector, in another task) has no context to restore.
    loop = asyncio.get_running_loop()
    span = tracing.tracer.start_span(name)
    started = loop.time()
    count = 0
    try:
        async for event in events:
            if count == 0:
                span.set_attribute("taskforce.stream.first_event_ms", round((loop.time() - started) * 1000, 3))
            count += 1
            yield event
    finally:
        span.set_attribute("taskforce.stream.events", count)
        span.end()

