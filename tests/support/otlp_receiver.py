"""An OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with protobuf bodies (what
``opentelemetry-exporter-otlp-proto-http`` sends), decoded with ``opentelemetry-proto`` into
``ReceivedSpan``s a test can query. A real HTTP app served by uvicorn: the services export to it
over the network as they would to Jaeger or a collector."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import serve_app

# opentelemetry.proto.trace.v1.Span.SpanKind
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id), hex
    status_code: int
    start_ns: int
    end_ns: int


@dataclass
class OTLPReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        self.requests += 1
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        service=str(resource.get("service.name")), name=span.name, kind=KINDS[span.kind],
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        status_code=span.status.code, start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    ))
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.trace_id == trace_id]

    def by_id(self, span_id: str) -> ReceivedSpan | None:
        return next((span for span in self.spans if span.span_id == span_id), None)

    def ancestors(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        """The span's parents, nearest first, as far as they were received."""
        chain, parent = [], self.by_id(span.parent_span_id)
        while parent is not None:
            chain.append(parent)
            parent = self.by_id(parent.parent_span_id)
        return chain


@asynccontextmanager
async def running_receiver() -> AsyncIterator[tuple[OTLPReceiver, str]]:
    """A receiver on loopback; yields it and the base URL to set as ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    receiver = OTLPReceiver()
    async with serve_app(receiver.app()) as base_url:
        yield receiver, base_url
