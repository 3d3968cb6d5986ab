"""A real vLLM joins the gateway's trace: started with ``--otlp-traces-endpoint`` (OTLP/HTTP, the same
receiver the gateway exports to), its ``llm_request`` span for a request sent through the gateway
carries the client's trace id, under the gateway's span for that upstream try."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.vllm import server
from tests.vllm.conftest import VLLM, running_vllm
from tests.vllm.served import served, tier_config

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-trace-key"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
VLLM_SPAN = "llm_request"  # vllm/v1/engine/output_processor.py (vLLM 0.32)


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    from_vllm: threading.Event = field(default_factory=threading.Event)

    def take(self, raw: bytes) -> None:
        message = ExportTraceServiceRequest.FromString(raw)
        spans = [s for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans]
        with self.lock:
            self.spans += spans
        if any(s.name == VLLM_SPAN for s in spans):
            self.from_vllm.set()


def receiver(got: Received) -> http.server.ThreadingHTTPServer:
    """An OTLP/HTTP endpoint in a thread of its own: vLLM exports to it while the test's loop waits."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            got.take(raw)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass  # the test's output is not the place for its access log

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VLLM, Received, str]]:
    got = Received()
    otlp = receiver(got)
    thread = threading.Thread(target=otlp.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{otlp.server_address[1]}/v1/traces"
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",  # vLLM's default is gRPC
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds between exports, not the SDK's 5 s
    }
    extra = (*server.DEFAULT_ARGS, "--otlp-traces-endpoint", endpoint)
    try:
        with running_vllm(tmp_path_factory.mktemp("vllm-traced") / "vllm.log", env, extra) as vllm:
            yield vllm, got, endpoint
    finally:
        otlp.shutdown()
        otlp.server_close()


async def test_vllm_puts_its_request_span_under_the_gateways_try(traced: tuple[VLLM, Received, str]) -> None:
    vllm, got, endpoint = traced
    models = [{"name": "tiny", "targets": [{"provider": "vllm", "base_url": vllm.url, "model": vllm.model}]}]
    async with served(tier_config(models, KEY, tracing={"endpoint": endpoint})) as url:
        headers = {"Authorization": f"Bearer {KEY}", "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}
        body = {"model": "tiny", "prompt": "one two three", "max_tokens": 4, "stream": True}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/v1/completions", json=body, headers=headers) as resp,
        ):
            raw = await resp.text()
        assert resp.status == 200 and raw.rstrip().endswith("data: [DONE]"), raw
    # closed: the gateway's spans are exported
    assert await asyncio.to_thread(got.from_vllm.wait, 60), "vLLM exported no llm_request span within 60 s"
    with got.lock:
        spans = list(got.spans)
    (tried,) = (s for s in spans if s.kind == Span.SPAN_KIND_CLIENT and s.trace_id.hex() == TRACE_ID)
    (in_vllm,) = (s for s in spans if s.name == VLLM_SPAN)
    assert in_vllm.trace_id.hex() == TRACE_ID
    assert in_vllm.parent_span_id == tried.span_id
