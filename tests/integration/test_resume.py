"""Mid-stream resume and the first-token deadline, against the fake upstream's vLLM stand-ins.

A stream whose target breaks after its first byte (reset, stall past the idle bound, an error event)
continues on the next target from exactly where it stopped: each dialect's client gets the unbroken
run's text, one finish, its terminator, and the unbroken run's usage. A target that cannot continue
(OpenAI's API), or a request that turned resume off, keeps the break: an error, never a finish. A
target slow to its first token is left for the next one before anything reaches the client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.obs import metrics as m
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME, INGRESSES, Answer, read
from tests.integration.test_stream_breaks import ending
from tests.support import eventually

FAST = {"connect": 1, "first_byte": 5, "idle": 0.5, "total": 30}
BREAKS = ["reset_after=3", "stall_after=3", "error_after=3"]
PROMPT = "tell me a story"


def pair(broken: fake.Upstream, healthy: fake.Upstream, second: str = "vllm", **model: Any) -> Any:
    targets = [target(broken, "vllm", weight=1e6, timeouts=FAST), target(healthy, second, weight=1e-6)]
    return config([{"name": "m", "targets": targets, **model}])


async def unbroken(gateway: GatewayFactory, healthy: fake.Upstream, stream: bool = True) -> dict[str, Answer]:
    gw = await gateway(config([{"name": "m", "targets": [target(healthy, "vllm")]}]))
    return {i.name: await gw.send(i, "m", PROMPT, stream, max_tokens=16, temperature=0) for i in INGRESSES}


@pytest.mark.parametrize("fault", BREAKS)
async def test_a_broken_stream_continues_on_the_next_target(gateway: GatewayFactory, upstream: Any, fault: str) -> None:
    broken = await upstream("vllm", faults=f"[[fault:{fault}]]")
    healthy = await upstream("vllm")
    want = await unbroken(gateway, healthy)
    gw = await gateway(pair(broken, healthy))
    resumes = resumed_count(fault.partition("_")[0])
    for ingress in INGRESSES:
        before = len(healthy.requests)
        got = await gw.send(ingress, "m", PROMPT, True, max_tokens=16, temperature=0)  # greedy
        error, finish, done = ending(got.raw)
        assert not error and finish and done == ingress.done, (ingress.name, got.raw)
        assert got.text == want[ingress.name].text and got.finish == want[ingress.name].finish, ingress.name
        if want[ingress.name].usage is not None:
            assert got.usage == want[ingress.name].usage, (ingress.name, got.usage)
        assert len(healthy.requests) == before + 1  # the continuation only: never the whole answer again
        body = healthy.requests[-1].body
        # the prompt's ids and the tokens sent: every stream that may resume asked for its ids...
        assert body["max_tokens"] == 16 - 3 and isinstance(body["prompt"], list), body
        # ...which a client whose dialect shows none never sees
        if ingress.name in ("openai", "sgp", "sgp5"):
            assert b'_ids":[' not in got.raw and b'"token"' not in got.raw, got.raw
    await gw.session.get(gw.url + "/metrics")  # the backlog drains before a scrape
    assert resumed_count(fault.partition("_")[0]) == resumes + len(INGRESSES)


CAUSES = {"reset": "upstream_failed", "stall": "upstream_timeout", "error": "upstream_failed"}


def resumed_count(fault: str) -> float:
    """Resumes counted for the break ``fault`` causes, over every target."""
    return sum(
        s.value
        for metric in m.RESUMES.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.labels["cause"] == CAUSES[fault]
    )


@pytest.mark.parametrize(("kind", "length"), [("vllm", 16), ("vllm", None), ("anthropic", 16)])
async def test_a_chat_continues_its_partial_assistant_message(
    gateway: GatewayFactory, upstream: Any, kind: str, length: int | None
) -> None:
    """vLLM continues a chat from its template's ids and the output's, as a completion; one without
    max_tokens, with continue_final_message; Anthropic from the partial message as its prefill."""
    broken = await upstream(kind, faults="[[fault:reset_after=3]]")
    healthy = await upstream(kind)
    pair_ = config([{"name": "m", "targets": [target(broken, kind, weight=1e6), target(healthy, kind, weight=1e-6)]}])
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": length, "stream": True}
    body["stream_options"] = {"include_usage": True}
    headers = {"Authorization": f"Bearer {fake_key()}"}
    answers = []
    for cfg in (config([{"name": "m", "targets": [target(healthy, kind)]}]), pair_):
        gw = await gateway(cfg)
        async with gw.session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as resp:
            answers.append(await resp.read())
    want, got = (chat_reading(raw) for raw in answers)
    assert got == want and want[0], (answers[1], answers[0])
    sent = healthy.requests[-1].body
    if kind == "vllm" and length is not None:
        assert isinstance(sent["prompt"], list) and sent["max_tokens"] == length - 3, sent
        return
    assert sent["messages"][-1]["role"] == "assistant" and sent["messages"][-1]["content"]
    if kind == "vllm":
        assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    else:
        assert "continue_final_message" not in sent


def fake_key() -> str:
    from tests.integration.dialect_clients import KEY

    return KEY


def chat_reading(raw: bytes) -> tuple[str, list[str], Any, int, bool]:
    """(text, finish reasons, usage, role deltas, [DONE]) of an OpenAI chat stream."""
    import json

    from tests.integration.dialect_clients import frames

    text, finishes, usage, roles, done = "", [], None, 0, False
    for data in frames(raw):
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        assert "error" not in chunk, chunk
        for c in chunk["choices"]:
            text += c["delta"].get("content") or ""
            roles += "role" in c["delta"]
            if c.get("finish_reason"):
                finishes.append(c["finish_reason"])
        usage = chunk.get("usage") or usage
    return text, finishes, usage, roles, done


async def test_a_replica_pool_continues_on_another_replica(gateway: GatewayFactory, upstream: Any) -> None:
    broken = await upstream("vllm", models=("tiny",), faults="[[fault:reset_after=3]]")
    healthy = await upstream("vllm", models=("tiny",))
    single = {"provider": "vllm", "base_url": healthy.url, "model": "tiny"}
    want = await (await gateway(config([{"name": "m", "targets": [single]}]))).send(
        BY_NAME["openai"], "m", PROMPT, True, max_tokens=16
    )
    pool = {"provider": "vllm", "replicas": [broken.url, healthy.url], "model": "tiny"}
    pool["balance"] = {"strategy": "round-robin"}
    gw = await gateway(config([{"name": "m", "targets": [pool]}]))
    for _ in range(2):  # round-robin: one of the two starts on the broken replica
        got = await gw.send(BY_NAME["openai"], "m", PROMPT, True, max_tokens=16)
        assert (got.text, got.finish, got.usage, got.done) == (want.text, want.finish, want.usage, True), got.raw
    assert len(broken.requests) >= 1


@pytest.mark.parametrize("fault", ["reset_after=3", "stall_after=3"])
async def test_a_target_that_cannot_continue_keeps_the_error(
    gateway: GatewayFactory, upstream: Any, fault: str
) -> None:
    broken = await upstream("vllm", faults=f"[[fault:{fault}]]")
    other = await upstream("openai")
    gw = await gateway(pair(broken, other, second="openai"))
    for ingress in INGRESSES:
        got = await gw.send(ingress, "m", PROMPT, True, max_tokens=16) if ingress.name != "friendli2024" else None
        if got is None:
            continue  # its reader asserts a complete event; test_stream_breaks covers its error ending
        error, finish, done = ending(got.raw)
        assert error and not finish and not done, (ingress.name, got.raw)
    assert len(other.requests) == 0


async def test_resume_off_by_model_or_header_keeps_the_error(gateway: GatewayFactory, upstream: Any) -> None:
    broken = await upstream("vllm", faults="[[fault:reset_after=3]]")
    healthy = await upstream("vllm")
    gw = await gateway(pair(broken, healthy, resume=False))
    got = await gw.send(BY_NAME["openai"], "m", PROMPT, True, max_tokens=16)
    assert ending(got.raw) == (True, False, False)
    gw = await gateway(pair(broken, healthy))
    path, headers, body = BY_NAME["openai"].request("m", PROMPT, True, max_tokens=16)
    async with gw.session.post(gw.url + path, json=body, headers={**headers, "X-Gateway-Resume": "off"}) as resp:
        assert ending(await resp.read()) == (True, False, False)
    assert len(healthy.requests) == 0


async def test_resumes_stop_at_the_cap(gateway: GatewayFactory, upstream: Any) -> None:
    """Every target breaks: one continuation (max_resumes: 1), then the error."""
    servers = [await upstream("vllm", faults="[[fault:reset_after=2]]") for _ in range(3)]
    targets = [target(s, "vllm", weight=10.0 ** (6 - 6 * i)) for i, s in enumerate(servers)]
    gw = await gateway(config([{"name": "m", "targets": targets, "max_resumes": 1}]))
    got = await gw.send(BY_NAME["openai"], "m", PROMPT, True, max_tokens=16)
    assert ending(got.raw) == (True, False, False)
    assert [len(s.requests) for s in servers] == [1, 1, 0]


async def test_a_slow_first_token_falls_over_within_the_deadline(gateway: GatewayFactory, upstream: Any) -> None:
    slow = await upstream("vllm", faults="[[fault:first_token=60]]")
    healthy = await upstream("vllm")
    ttft = {**FAST, "ttft": 0.3}
    targets = [target(slow, "vllm", weight=1e6, timeouts=ttft), target(healthy, "vllm", weight=1e-6)]
    gw = await gateway(config([{"name": "m", "targets": targets}]))
    failures = m.UPSTREAM_FAILURES.labels("vllm:up-model", "first_token_timeout")
    before = failures._value.get()
    loop = asyncio.get_running_loop()
    began = loop.time()
    got = await gw.send(BY_NAME["openai"], "m", PROMPT, True, max_tokens=16)
    took = loop.time() - began
    assert got.done and got.finish and len(healthy.requests) == 1, got.raw
    assert 0.3 <= took < 60  # it waited for the bound, and not for the slow target
    assert slow.cancelled == 1  # the slow target's request was given up
    await gw.session.get(gw.url + "/metrics")  # the backlog drains before a scrape
    assert failures._value.get() == before + 1


async def test_a_team_ceiling_cuts_a_target_s_first_token_deadline(gateway: GatewayFactory, upstream: Any) -> None:
    slow = await upstream("vllm", faults="[[fault:first_token=60]]")
    healthy = await upstream("vllm")
    targets = [target(slow, "vllm", weight=1e6, timeouts={**FAST, "ttft": 50}), target(healthy, "vllm", weight=1e-6)]
    cfg = config([{"name": "m", "targets": targets}]).model_dump()
    cfg["teams"][0]["ttft"] = 0.3
    from gateway.runtime.config import parse_config

    gw = await gateway(parse_config(cfg))
    got = await gw.send(BY_NAME["openai"], "m", PROMPT, True, max_tokens=16)
    assert got.done and len(healthy.requests) == 1 and slow.cancelled == 1


def _read(raw: bytes) -> Answer:
    return read(BY_NAME["openai"], 200, raw, True)


async def test_a_client_gone_closes_a_resumable_stream_s_upstream(gateway: GatewayFactory, upstream: Any) -> None:
    """The resumable stream's wrapper closes the upstream's stream with its own (vLLM aborts then)."""
    slow = await upstream("vllm", faults="[[fault:hang_between=0.2]]")
    other = await upstream("vllm")
    gw = await gateway(pair(slow, other))
    path, headers, body = BY_NAME["openai"].request("m", PROMPT, True, max_tokens=16)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        await resp.content.readline()
    await eventually(lambda: slow.cancelled, "the hang-up at the upstream")
    assert slow.cancelled == 1 and not other.requests
