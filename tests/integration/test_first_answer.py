"""A new user's first minute: the embedded default answers ``demo`` with nothing else running (raw
HTTP and the openai SDK, from ``llm-gateway serve`` as a user starts it), the mock goes through every
dialect like any target, an absent local vLLM says where it was looked for and what to do, a model
the local vLLM does not serve goes to the one vendor whose key is set, and ``/ready`` is 200 while
some model can be served."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.runtime.config import GatewayConfig, parse_config
from gateway.runtime.defaults import embedded
from gateway.web.app import create_app
from gateway.web.state import GATEWAY
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config
from tests.integration.dialect_clients import INGRESSES, Ingress
from tests.support.gateways import ROOT, Gateways
from tests.support.redis_servers import free_port

OPENAI_SDK = ROOT / ".sdk-venvs" / "openai" / "bin" / "python"
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
SDK_SCRIPT = """
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="none")
whole = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8)
chunks = list(client.chat.completions.create(
    model="demo", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8, stream=True,
    stream_options={"include_usage": True},
))
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
print(json.dumps({
    "whole": whole.choices[0].message.content, "usage": whole.usage.completion_tokens,
    "streamed": text, "chunks": len(chunks), "stream_usage": chunks[-1].usage.completion_tokens,
}))
"""


def closed_url() -> str:
    """A loopback address nothing listens on: the absent local vLLM."""
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.fixture
async def started() -> AsyncIterator[Any]:
    """Gateways made from the embedded default in this process, on real sockets."""
    servers: list[TestServer] = []

    async def start(env: dict[str, str]) -> str:
        cfg, local = embedded(env)
        server = TestServer(create_app(cfg, local), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url(""))

    yield start
    for s in servers:
        await s.close()


async def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as resp:
        return resp.status, await resp.json(), dict(resp.headers)


async def get(url: str, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url + path) as resp:
        return resp.status, await resp.json()


async def test_llm_gateway_serve_answers_demo_at_once(gateways: Gateways) -> None:
    env = {"VLLM_BASE_URL": closed_url(), "OPENAI_API_KEY": "", "LLM_GATEWAY_API_KEY": ""}
    gw = await gateways.start(env=env)
    url, port = gw.url, gw.url.rsplit(":", 1)[1]
    try:
        # what the start-up curl line sends
        body = {"model": "demo", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 6}
        status, answer, _ = await post(url, "/v1/chat/completions", body)
        assert status == 200, answer
        assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] == 6
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/v1/chat/completions", json={**body, "stream": True}) as resp,
        ):
            assert resp.status == 200
            reads = [chunk async for chunk, _ in resp.content.iter_chunks()]
        events = [line for chunk in reads for line in chunk.split(b"\n") if line.startswith(b"data: {")]
        assert len(events) >= 6 and len(reads) > 1, "the stream must arrive token by token"
        status, ready = await get(url, "/ready")
        assert status == 200 and ready["detail"]["demo"] == {"mock:demo": True}
        if OPENAI_SDK.exists():
            clean = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARS}
            sdk = await asyncio.to_thread(
                subprocess.run,
                [str(OPENAI_SDK), "-c", SDK_SCRIPT, url + "/v1"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**clean, "HOME": str(ROOT / ".sdk-venvs")},
            )
            assert sdk.returncode == 0, sdk.stderr
            got = json.loads(sdk.stdout)
            assert got["whole"] == got["streamed"] and got["usage"] == got["stream_usage"] == 8
            assert got["chunks"] > 8
    finally:
        text = await gw.stop()
    assert f"curl -s http://127.0.0.1:{port}/v1/chat/completions" in text
    assert f'OpenAI(base_url="http://127.0.0.1:{port}/v1"' in text
    assert "OPENAI_API_KEY to reach a vendor" in text


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_mock_answers_every_dialect(gateway: GatewayFactory, ingress: Ingress) -> None:
    gw = await gateway(
        config([{"name": "demo", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]}])
    )
    # Friendli's dialects draw a seed when none is given (they report it): the same one, the same text.
    fields = {"max_tokens": 5, **({"seed": 3} if ingress.name.startswith("friendli") else {})}
    whole = await gw.send(ingress, "demo", "Tell me a story.", False, **fields)
    streamed = await gw.send(ingress, "demo", "Tell me a story.", True, **fields)
    assert whole.status == streamed.status == 200, (whole.body, streamed.raw)
    assert whole.text and whole.text == streamed.text
    assert whole.finish == streamed.finish and whole.finish in ("length", "LENGTH", "max_tokens")


async def test_absent_local_vllm_says_where_and_what_to_do(started: Any) -> None:
    local = closed_url()
    url = await started({"VLLM_BASE_URL": local})
    body = {"model": "llama", "prompt": "hi", "max_tokens": 3}
    for _ in range(3):
        status, answer, _ = await post(url, "/v1/completions", body)
        assert status == 502
        message = answer["error"]["message"]
        # the client is told which target and why; where it is and what to run is the operator's
        # (the log line, /status: tests/unit/test_defaults.py checks that hint)
        assert message == "target 'local-vllm' is unreachable (connection refused)"
    status, answer, headers = await post(url, "/v1/completions", body)
    assert status == 503
    assert (
        "cooling down" in answer["error"]["message"]
        and "last failure: target 'local-vllm' is unreachable" in (answer["error"]["message"])
    )
    assert int(headers["Retry-After"]) >= 1
    status, ready = await get(url, "/ready")
    assert status == 200 and ready["ready"] is True  # demo is still served
    assert ready["detail"] == {"demo": {"mock:demo": True}, "*": {"local-vllm": False}}
    _, models = await get(url, "/v1/models")
    assert [m["id"] for m in models["data"]] == ["demo"]


async def test_unlisted_name_goes_to_the_only_vendor(started: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    local = await fake.start("openai")
    vendor = await fake.start("openai", api_key="upstream-key")
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "upstream-key")
        env = {"VLLM_BASE_URL": local.url, "OPENAI_API_KEY": "upstream-key", "OPENAI_BASE_URL": vendor.url}
        url = await started(env)
        status, answer, _ = await post(url, "/v1/completions", {"model": "gpt-4o-mini", "prompt": "hi"})
        assert status == 200, answer
        assert [r.body["model"] for r in vendor.requests] == ["gpt-4o-mini"]
        status, answer, _ = await post(url, "/v1/completions", {"model": "up-model", "prompt": "hi"})
        assert status == 200, answer
        assert [r.body["model"] for r in local.requests] == ["up-model"]  # what the local vLLM lists stays local
        _, models = await get(url, "/v1/models")
        assert [m["id"] for m in models["data"]] == ["demo", "up-model", "openai/up-model"]
        status, ready = await get(url, "/ready")
        assert status == 200 and ready["detail"]["*"] == {"local-vllm": True, "vendor:openai": True}
    finally:
        await local.close()
        await vendor.close()


async def test_ready_is_503_only_when_nothing_can_be_served(gateway: GatewayFactory) -> None:
    dead: GatewayConfig = parse_config(
        {"models": [{"name": "m", "targets": [{"provider": "vllm", "base_url": closed_url()}]}], "auth": "none"}
    )
    gw = await gateway(dead)
    async with gw.session.get(gw.url + "/ready") as resp:
        body = await resp.json()
    assert resp.status == 503 and body["ready"] is False and body["detail"] == {"m": {"vllm:m": False}}


async def test_ready_says_503_once_draining(gateway: GatewayFactory) -> None:
    """Shutdown sets the app draining before it waits for requests in flight: a load balancer that still
    asks on an open connection is told to send nothing new."""
    gw = await gateway(config([{"name": "m", "targets": [{"provider": "mock"}]}]))
    async with gw.session.get(gw.url + "/ready") as resp:
        assert resp.status == 200 and (await resp.json())["draining"] is False
    gw.server.app[GATEWAY].draining = True
    async with gw.session.get(gw.url + "/ready") as resp:
        assert resp.status == 503 and (await resp.json())["draining"] is True
