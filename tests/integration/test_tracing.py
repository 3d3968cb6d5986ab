"""Traces, followed end to end: a client's ``traceparent`` in, the gateway's spans out to a real
OTLP/HTTP receiver (opentelemetry-proto's ``ExportTraceServiceRequest``, decoded here), and the
trace context on to each upstream try, so an upstream that traces joins the same trace."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from gateway.runtime.config import hash_key
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, KEY
from tests.integration.test_responses import scripted_target, scripted_upstream
from tests.support import eventually

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SAMPLED = 0x01  # the trace-flags bit (W3C Trace Context); others, such as "random", may be set too
PROMPT = "Tell nobody: the walrus recipe is pickled herring"
HOLD = "[[fault:hang_before=60]]"  # holds its slot until its client goes
TEAMS = [{"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}], "limits": {"concurrency": 4}}]


class Receiver:
    """An OTLP/HTTP traces endpoint: every export's raw bytes, and its spans decoded."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[Span] = []

    async def export(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        self.bodies.append(raw)
        message = ExportTraceServiceRequest.FromString(raw)
        self.spans += [s for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans]
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", got.export)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield got, str(server.make_url("/v1/traces"))
    await server.close()


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(span: Span) -> dict[str, Any]:
    return {a.key: value(a.value) for a in span.attributes}


def traceparent(header: str) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C ``traceparent``."""
    version, trace_id, parent, flags = header.split("-")
    assert version == "00" and int(flags, 16) & SAMPLED, header
    return trace_id, parent


async def test_a_streamed_request_is_traced_through_admission_and_a_fallback(
    gateway: GatewayFactory, upstream: Any, receiver: tuple[Receiver, str]
) -> None:
    got, endpoint = receiver
    dead = await upstream("vllm", faults="[[fault:status=503]]")  # fails before its first byte
    live = await upstream("vllm")
    targets = [target(dead, "vllm", weight=1e6, name="first"), target(live, "vllm", weight=1e-6, name="second")]
    gw = await gateway(config([{"name": "m", "targets": targets}], teams=TEAMS, tracing={"endpoint": endpoint}))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {**BEARER, "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01", "tracestate": "client=7"}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as resp:
        answer = await resp.text()
    assert resp.status == 200 and answer.rstrip().endswith("data: [DONE]"), answer
    words = "".join(
        chunk["choices"][0]["delta"].get("content") or ""
        for line in answer.splitlines()
        if line.startswith("data: {") and (chunk := json.loads(line[6:]))["choices"]
    )
    assert words  # the answer came through the second target
    await gw.server.close()  # the app's shutdown exports every span left

    exported = b"".join(got.bodies)
    assert exported and PROMPT.encode() not in exported and b"walrus" not in exported
    assert KEY.encode() not in exported and words.encode() not in exported
    names = sorted(s.name for s in got.spans)
    assert names == ["POST /v1/chat/completions", "chat up-model", "chat up-model", "gateway.admission"], names
    (server,) = (s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER)
    (admission,) = (s for s in got.spans if s.name == "gateway.admission")
    tries = (s for s in got.spans if s.kind == Span.SPAN_KIND_CLIENT)
    first, second = sorted(tries, key=lambda s: s.start_time_unix_nano)
    # one trace, the client's: the server span is its child, every other span the server span's
    assert {s.trace_id.hex() for s in got.spans} == {TRACE_ID}
    assert server.parent_span_id.hex() == CLIENT_SPAN
    assert {s.parent_span_id for s in (admission, first, second)} == {server.span_id}
    assert server.start_time_unix_nano <= admission.start_time_unix_nano <= admission.end_time_unix_nano
    assert admission.end_time_unix_nano <= first.start_time_unix_nano < first.end_time_unix_nano
    assert first.end_time_unix_nano <= second.start_time_unix_nano <= second.end_time_unix_nano
    assert second.end_time_unix_nano <= server.end_time_unix_nano
    # the fallback is visible: the first try failed, the second answered
    assert attrs(first)["gateway.target"] == "first" and attrs(first)["gateway.attempt"] == 1
    assert attrs(first)["error.type"] == "upstream_failed" and first.status.code == Status.STATUS_CODE_ERROR
    assert attrs(second)["gateway.target"] == "second" and attrs(second)["gateway.attempt"] == 2
    assert "error.type" not in attrs(second) and second.status.code != Status.STATUS_CODE_ERROR
    for span in (first, second):
        assert attrs(span)["gen_ai.provider.name"] == "vllm" and attrs(span)["gen_ai.request.model"] == "up-model"
    # the GenAI conventions' attributes, and ours
    on_server = attrs(server)
    assert on_server["gen_ai.operation.name"] == "chat"
    assert on_server["gen_ai.request.model"] == "m"
    assert on_server["gen_ai.response.model"] == "up-model"
    assert on_server["gen_ai.provider.name"] == "vllm"
    assert on_server["gen_ai.usage.input_tokens"] > 0 and on_server["gen_ai.usage.output_tokens"] == 5
    assert on_server["gen_ai.response.finish_reasons"] == ["length"]
    assert on_server["gateway.team"] == "team1" and on_server["gateway.dialect"] == "openai"
    assert on_server["gateway.attempts"] == 2 and on_server["http.response.status_code"] == 200
    assert [e.name for e in server.events] == ["first_token"]
    assert second.start_time_unix_nano <= server.events[0].time_unix_nano
    # each try carried its own span's context upstream, and the client's trace state
    (tried_dead,) = dead.requests
    (tried_live,) = live.requests
    assert traceparent(tried_dead.headers["traceparent"]) == (TRACE_ID, first.span_id.hex())
    assert traceparent(tried_live.headers["traceparent"]) == (TRACE_ID, second.span_id.hex())
    assert tried_live.headers["tracestate"] == "client=7"


async def test_without_tracing_nothing_goes_upstream_but_what_the_client_sent(
    gateway: GatewayFactory, upstream: Any
) -> None:
    """Tracing off: the gateway is no party to the trace (it neither makes spans nor rewrites the
    context), and an upstream sees no trace header the gateway made up."""
    live = await upstream("vllm")
    gw = await gateway(config([{"name": "m", "targets": [target(live, "vllm")]}]))
    body = {"model": "m", "prompt": "hi", "max_tokens": 2}
    headers = {**BEARER, "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
    (tried,) = live.requests
    assert "traceparent" not in tried.headers and "tracestate" not in tried.headers


async def test_sampling_follows_the_client_and_the_ratio_applies_to_traces_begun_here(
    gateway: GatewayFactory, upstream: Any, receiver: tuple[Receiver, str]
) -> None:
    """At ``sampling_ratio: 0`` a trace the client samples is still recorded (parent-based), and one
    that begins here is not; both still carry a trace context upstream, with its sampled flag."""
    got, endpoint = receiver
    live = await upstream("vllm")
    tracing = {"endpoint": endpoint, "sampling_ratio": 0}
    gw = await gateway(config([{"name": "m", "targets": [target(live, "vllm")]}], tracing=tracing))
    body = {"model": "m", "prompt": "hi", "max_tokens": 2}
    for traced in ({"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}, {}):
        async with gw.session.post(gw.url + "/v1/completions", json=body, headers={**BEARER, **traced}) as resp:
            assert resp.status == 200, await resp.text()
    await gw.server.close()
    assert {s.trace_id.hex() for s in got.spans} == {TRACE_ID}
    assert sorted(s.name for s in got.spans) == [
        "POST /v1/completions",
        "gateway.admission",
        "text_completion up-model",
    ]
    sampled, begun_here = (r.headers["traceparent"].split("-") for r in live.requests)
    assert sampled[1] == TRACE_ID and int(sampled[3], 16) & SAMPLED
    assert begun_here[1] != TRACE_ID and not int(begun_here[3], 16) & SAMPLED


async def test_a_stream_broken_after_its_first_byte_is_a_failed_request_span(
    gateway: GatewayFactory, upstream: Any, receiver: tuple[Receiver, str]
) -> None:
    """The client got a 200 and then an in-band error: the server span says the request failed (there
    is no fallback after the first byte, so the one try's span is the one that answered)."""
    got, endpoint = receiver
    live = await upstream("vllm")
    gw = await gateway(config([{"name": "m", "targets": [target(live, "vllm")]}], tracing={"endpoint": endpoint}))
    body = {"model": "m", "prompt": "x [[fault:reset_after=2]]", "max_tokens": 8, "stream": True}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
        answer = await resp.text()
    assert resp.status == 200 and '"error"' in answer, answer
    await gw.server.close()
    (server,) = (s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER)
    assert attrs(server)["http.response.status_code"] == 200 and attrs(server)["error.type"] == "upstream_failed"
    assert server.status.code == Status.STATUS_CODE_ERROR
    assert [e.name for e in server.events] == ["first_token"]


async def test_a_resumed_stream_is_one_trace_with_a_span_per_attempt(
    gateway: GatewayFactory, upstream: Any, receiver: tuple[Receiver, str]
) -> None:
    """A stream broken mid-answer and continued elsewhere (``routing/resume.py``): the broken try's
    span failed, the continuation's is the next attempt, both children of the one server span."""
    got, endpoint = receiver
    broken = await upstream("vllm", faults="[[fault:reset_after=2]]")
    live = await upstream("vllm")
    targets = [target(broken, "vllm", weight=1e6, name="first"), target(live, "vllm", weight=1e-6, name="second")]
    gw = await gateway(config([{"name": "m", "targets": targets}], tracing={"endpoint": endpoint}))
    body = {"model": "m", "prompt": "x", "max_tokens": 8, "stream": True}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
        answer = await resp.text()
    assert resp.status == 200 and '"error"' not in answer and answer.rstrip().endswith("[DONE]"), answer
    await gw.server.close()
    (server,) = (s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER)
    first, second = sorted(
        (s for s in got.spans if s.kind == Span.SPAN_KIND_CLIENT), key=lambda s: s.start_time_unix_nano
    )
    assert {s.trace_id for s in got.spans} == {server.trace_id}
    assert {first.parent_span_id, second.parent_span_id} == {server.span_id}
    assert attrs(first)["gateway.target"] == "first" and first.status.code == Status.STATUS_CODE_ERROR
    assert attrs(second)["gateway.target"] == "second" and attrs(second)["gateway.attempt"] == 2
    assert second.status.code != Status.STATUS_CODE_ERROR and first.end_time_unix_nano <= second.start_time_unix_nano
    assert "error.type" not in attrs(server) and attrs(server)["gateway.attempts"] == 2


@pytest.mark.parametrize(
    ("path", "body", "operation", "api"),
    [
        ("/v1/responses", {"model": "m", "input": PROMPT, "max_output_tokens": 3}, "chat", "responses"),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            "chat",
            "chat_completions",
        ),
        ("/v1/embeddings", {"model": "e", "input": "hi"}, "embeddings", None),
    ],
)
async def test_each_operation_is_named_by_the_genai_conventions(
    gateway: GatewayFactory,
    upstream: Any,
    receiver: tuple[Receiver, str],
    path: str,
    body: dict[str, Any],
    operation: str,
    api: str | None,
) -> None:
    """A Responses call is a ``chat`` (a well-known value that applies MUST be used) whose
    ``openai.api.type`` is ``responses``; embeddings are ``embeddings``."""
    got, endpoint = receiver
    live = await upstream("vllm")
    async with scripted_upstream() as vectors:  # the wire fake serves no embeddings: a scripted one does
        embed = {**scripted_target(vectors), "model": "up-model"}
        models = [
            {"name": "m", "targets": [target(live, "vllm")]},
            {"name": "e", "kind": "embedding", "targets": [embed]},
        ]
        gw = await gateway(config(models, teams=TEAMS, tracing={"endpoint": endpoint}))
        async with gw.session.post(gw.url + path, json=body, headers=BEARER) as resp:
            assert resp.status == 200, await resp.text()
        await gw.server.close()
    (server,) = (s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER)
    assert attrs(server)["gen_ai.operation.name"] == operation
    assert attrs(server).get("openai.api.type") == api
    (client,) = (s for s in got.spans if s.kind == Span.SPAN_KIND_CLIENT)
    assert client.name == f"{operation} up-model"


async def test_a_queued_request_has_a_queue_span_with_its_wait_and_class(
    gateway: GatewayFactory, upstream: Any, receiver: tuple[Receiver, str]
) -> None:
    got, endpoint = receiver
    live = await upstream("openai")
    model = {"name": "m", "targets": [target(live, "openai")], "queue": {"capacity": 1, "timeout": 60}}
    gw = await gateway(config([model], tracing={"endpoint": endpoint}))
    path, headers, body = "/v1/completions", {**BEARER, "X-Gateway-Priority": "batch"}, {"model": "m", "max_tokens": 2}
    holder = asyncio.create_task(gw.session.post(gw.url + path, json={**body, "prompt": HOLD}, headers=BEARER))
    await eventually(lambda: live.active == 1, "the slot held")
    waiting = asyncio.create_task(gw.session.post(gw.url + path, json={**body, "prompt": "after"}, headers=headers))
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    await eventually(lambda: fair.local.waiting == 1, "the second request queued")
    holder.cancel()
    async with await waiting as resp:
        assert resp.status == 200
    await gw.server.close()
    queued = [s for s in got.spans if s.name == "gateway.queue"]
    assert len(queued) == 2  # the holder's (no wait) and the waiter's
    waited = max(queued, key=lambda s: attrs(s)["gateway.queue.wait_seconds"])
    assert attrs(waited)["gateway.queue.class"] == "batch" and attrs(waited)["gateway.queue.wait_seconds"] > 0
