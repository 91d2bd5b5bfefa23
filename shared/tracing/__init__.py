"""OpenTelemetry traces of both services: one trace per chat message, through both services.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; then the
standard variables apply (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_BSP_*``), spans go out as OTLP over
HTTP. The choice is made once, at start-up: off, no middleware is added, no client, engine or provider
is wrapped, and the domain's few calls (one per turn, run, tool call) go to ``NO_TRACING``, whose
spans are one shared ``nullcontext``. Nothing is done per event or per token either way: a stream is
one span with its event count and the time of its first event.

| module | what it traces | where it is installed |
|---|---|---|
| ``config`` | the environment read once; ``build_tracing`` makes the process's tracer provider | each service's lifespan (one provider per worker process, flushed on shutdown) |
| ``export`` | ``StoppableExporter``: the OTLP exporter, which the shutdown's short flush makes give up | ``build_tracing`` |
| ``core`` | ``Tracing``: spans, W3C ``traceparent`` in and out, links, exemplars | ``app.state.tracing``, handed to the domain |
| ``asgi`` | the HTTP server span (an SSE stream is one span), the WebSocket handshake span | ``create_app`` of both services, only when configured |
| ``http_client`` | ``traced_transport``: a client span and ``traceparent`` on each outbound request | the Agent Service client, the model provider's client |
| ``genai`` | ``traced_provider``: ``chat {model}`` spans with the GenAI attributes | the LLM provider of both services |
| ``db`` | ``trace_engine``: a span per SQL statement made inside a traced operation (engine events) | both services' main engine |
| ``logs`` | ``trace_id``/``span_id`` on every JSON log line written inside a span | the root log handler |

Background loops (group commits, lease renewals, sweeps, health polls) run outside any span and make
none: the database and HTTP client spans are made only under a span that records.
"""

from shared.tracing.core import NO_TRACING, Tracing, TracingOff

__all__ = ["NO_TRACING", "Tracing", "TracingOff"]
