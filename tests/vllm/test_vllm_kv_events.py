"""Routing on the KV cache two real vLLM replicas (CPU) report through ``--kv-events-config``: the
gateway's tokens equal the engine's, a prompt whose prefix one replica cached (sent there behind the
gateway's back) is routed to it, a gateway started later learns what was cached from the replay
socket, and with a publisher unreachable the pool routes as before."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.pool.kv_events import ReplicaView, chain_hashes
from backends.pool.kv_router import EventsRouter
from backends.pool.prompt_tokens import PromptTokens
from gateway.core.request import ChatMessage, InternalRequest, Operation
from tests.support import eventually
from tests.vllm.conftest import VLLM
from tests.vllm.engine_stats import ran_to_end
from tests.vllm.pools import pool_gateway

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-kv-events-key"
BEARER = {"Authorization": f"Bearer {KEY}"}
SENTENCE = "the quick brown fox jumps over the lazy dog gateway tests talk to a real inference server"
WORDS = SENTENCE.split()


class Gateway(NamedTuple):
    url: str
    session: aiohttp.ClientSession
    router: EventsRouter


def prompt(seed: int, words: int = 300) -> str:
    """A prompt of the tokenizer's words, different for each seed from its first block on: 300 words are
    over two of the CPU build's 128-token blocks, and well within the servers' token limit."""
    return " ".join(WORDS[(seed * 7 + i * (seed + 3)) % len(WORDS)] for i in range(words))


@contextlib.asynccontextmanager
async def gateway(replicas: list[VLLM], endpoints: list[str], replays: tuple[str, ...] = ()) -> AsyncIterator[Gateway]:
    target = {
        "provider": "vllm",
        "name": "tiny-kv",
        "replicas": [v.url for v in replicas],
        # scraped once at start-up: the choice rests on the events and the gateway's own in-flight counts,
        # and a slack no load here reaches, so a cached prefix always wins
        "balance": {
            "scrape_interval": 3600.0,
            "stale_after": 600.0,
            "affinity_slack": 100.0,
            "kv_events": {
                "endpoints": endpoints,
                "replay_endpoints": replays,
                "tokenizer": str(replicas[0].model_dir),
            },
        },
        "timeouts": {"connect": 30.0},
    }
    async with pool_gateway(target, KEY) as (url, pool), aiohttp.ClientSession() as session:
        assert pool.kv_events is not None
        yield Gateway(url, session, pool.kv_events)


async def scrape(gw: Gateway) -> dict[tuple[str, ...], float]:
    """The pool's routing and events series on the gateway's /metrics: (name, its other labels' values
    in their names' order) → value."""
    async with gw.session.get(gw.url + "/metrics") as resp:
        text = await resp.text()
    return {
        (s.name, *(v for k, v in sorted(s.labels.items()) if k != "target")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("target") == "tiny-kv"
    }


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    async with session.post(url, json=body, **kw) as resp:
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


async def test_the_gateways_tokens_are_the_engines(vllm_server: VLLM) -> None:
    tokens = PromptTokens(vllm_server.model_dir)
    async with aiohttp.ClientSession() as session:
        for text in ["hello world", prompt(1), 'yes no 0123456789 {}[]:," true false null']:
            engine = await post(session, vllm_server.base + "/tokenize", {"model": "tiny", "prompt": text})
            ours = tokens.tokens(InternalRequest(operation=Operation.COMPLETION, model="tiny", prompts=(text,)))
            assert ours == engine["tokens"], text
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt(2, 20)}]
        body = {"model": "tiny", "messages": messages, "add_generation_prompt": True}
        engine = await post(session, vllm_server.base + "/tokenize", body)
    chat = InternalRequest(
        operation=Operation.CHAT, model="tiny", messages=tuple(ChatMessage(m["role"], m["content"]) for m in messages)
    )
    assert tokens.tokens(chat) == engine["tokens"]


async def test_a_prefix_cached_on_a_replica_is_routed_to_it(vllm_server: VLLM, vllm_second: VLLM) -> None:
    replicas = [vllm_server, vllm_second]
    async with gateway(replicas, [v.events for v in replicas]) as gw:
        views = gw.router.events.views
        await eventually(lambda: gw.router.events.live([0, 1]), "both publishers connected")
        # each replica caches a prompt of its own, sent to it directly (another gateway, say)
        prompts = [prompt(10), prompt(11)]
        hashes = []
        for i, (vllm, text) in enumerate(zip(replicas, prompts, strict=True)):
            await post(gw.session, vllm.url + "/completions", {"model": "tiny", "prompt": text, "max_tokens": 1})
            request = InternalRequest(operation=Operation.COMPLETION, model="tiny", prompts=(text,))
            ids = gw.router.prompts.tokens(request)
            assert ids is not None

            def cached(i: int = i, ids: list[int] = ids) -> bool:
                size = views[i].block_size
                return size is not None and views[i].depth(chain_hashes(ids, size)) >= 2

            await eventually(cached, f"replica {i} reported the prompt's blocks ({len(ids)} tokens): {views[i]}")
            hashes.append(ids)
        assert all(views[1 - i].depth(chain_hashes(ids, views[i].block_size or 1)) == 0 for i, ids in enumerate(hashes))
        before = [await ran_to_end(v) for v in replicas]
        decided = ("gateway_routing_decisions_total", "cached", "events")
        counted = (await scrape(gw))[decided]
        # four requests sharing each prompt's prefix (a different ending each time), through the gateway
        for text in prompts:
            for n in range(4):
                body = {"model": "tiny", "prompt": f"{text} and then {n}", "max_tokens": 1}
                await post(gw.session, gw.url + "/v1/completions", body, headers=BEARER)
        served = [await ran_to_end(v) - b for v, b in zip(replicas, before, strict=True)]
        assert served == [4, 4] and gw.router.hits == 8, (served, gw.router.hits, gw.router.fallbacks)
        # what operators see of it: the decisions, and both feeds connected and taking stored blocks
        seen = await scrape(gw)
        assert seen[decided] - counted == 8
        for state in gw.router.balancer.replicas:
            assert seen[("gateway_kv_events_connected", state.label)] == 1
            assert seen[("gateway_kv_events_total", "stored", state.label)] >= 1
            assert seen[("gateway_kv_events_blocks", state.label)] >= 2


async def test_with_a_publisher_unreachable_the_pool_routes_as_before(
    vllm_server: VLLM, vllm_second: VLLM, tmp_path: Path
) -> None:
    replicas = [vllm_server, vllm_second]
    async with gateway(replicas, [vllm_server.events, f"ipc://{tmp_path}/nobody.ipc"]) as gw:
        await eventually(lambda: gw.router.events.views[0].live, "the first publisher connected")
        text = prompt(12)
        await post(gw.session, vllm_server.url + "/completions", {"model": "tiny", "prompt": text, "max_tokens": 1})
        for n in range(3):
            body = {"model": "tiny", "prompt": f"{text} and then {n}", "max_tokens": 1}
            await post(gw.session, gw.url + "/v1/completions", body, headers=BEARER)
        # the second replica's view never came up: the events could not compare, the local router chose
        assert not gw.router.events.views[1].live
        assert gw.router.hits == 0 and gw.router.fallbacks == 3


def completion(text: str) -> InternalRequest:
    return InternalRequest(operation=Operation.COMPLETION, model="tiny", prompts=(text,))


def depth(view: ReplicaView, ids: list[int]) -> int:
    return view.depth(chain_hashes(ids, view.block_size)) if view.block_size is not None else 0


async def test_a_gateway_started_later_learns_the_cache_from_the_replay(vllm_server: VLLM, vllm_second: VLLM) -> None:
    replicas = [vllm_server, vllm_second]
    text = prompt(13)
    async with aiohttp.ClientSession() as session:  # cached before any gateway listens
        await post(session, vllm_second.url + "/completions", {"model": "tiny", "prompt": text, "max_tokens": 1})
    async with gateway(replicas, [v.events for v in replicas], tuple(v.replay for v in replicas)) as gw:
        await eventually(lambda: gw.router.events.live([0, 1]), "both publishers connected")
        ids = gw.router.prompts.tokens(completion(text))
        assert ids is not None
        views = gw.router.events.views
        # live only once the replay was applied: no waiting for new events
        assert gw.router.events.replayed > 0 and depth(views[1], ids) >= 2 and depth(views[0], ids) == 0, views
        before = await ran_to_end(vllm_second)
        await post(
            gw.session,
            gw.url + "/v1/completions",
            {"model": "tiny", "prompt": f"{text} again", "max_tokens": 1},
            headers=BEARER,
        )
        assert await ran_to_end(vllm_second) - before == 1 and gw.router.hits == 1
