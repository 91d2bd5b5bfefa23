"""Whether tracing is on, read once from the standard OpenTelemetry variables, and the tracer
provider of this process.

On when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and neither
``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says otherwise). The SDK itself reads the
rest: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG`` (parent-based always-on by default), the exporter's ``OTEL_EXPORTER_OTLP_*``
(headers, timeout, compression) and the batch processor's ``OTEL_BSP_*``. The SDK is imported only
when tracing is on.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from shared.tracing.core import NO_TRACING, Tracing, TracingOff

__all__ = ["TracingConfig", "build_tracing"]

log = logging.getLogger(__name__)

_TRUE = frozenset({"1", "true", "yes", "on"})


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


@dataclass(frozen=True, slots=True)
class TracingConfig:
    enabled: bool
    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, the GenAI instrumentations' switch.
    capture_content: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TracingConfig:
        env = os.environ if environ is None else environ
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        enabled = bool(endpoint and endpoint.strip()) and not _true(env.get("OTEL_SDK_DISABLED")) and (
            env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none")
        return cls(enabled=enabled, capture_content=_true(env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")))


def build_tracing(
    service_name: str, config: TracingConfig, *, trust_client_context: bool,
) -> Tracing | TracingOff:
    """This process's tracer provider exporting OTLP over HTTP, or ``NO_TRACING``. Close it with
    ``aclose`` (the lifespan does, last, within the shutdown's grace)."""
    if not config.enabled:
        return NO_TRACING
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from shared.tracing.export import StoppableExporter

    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    defaults: dict[str, str] = {}
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        defaults[SERVICE_NAME] = service_name
    if SERVICE_INSTANCE_ID not in resource.attributes:
        # One provider per worker process: each is an instance of its own.
        defaults[SERVICE_INSTANCE_ID] = f"{socket.gethostname()}-{os.getpid()}"
    provider = TracerProvider(resource=resource.merge(Resource(defaults)))  # the sampler from OTEL_TRACES_SAMPLER
    exporter = StoppableExporter(OTLPSpanExporter())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: spans exported with OTLP over HTTP",
             extra={"service_name": provider.resource.attributes.get(SERVICE_NAME)})
    return Tracing(provider, trust_client_context=trust_client_context, capture_content=config.capture_content,
                   stop_export=exporter.stop)
