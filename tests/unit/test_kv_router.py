"""Routing on vLLM's KV-cache events (``backends/pool/kv_router.py``) with a real ZMQ publisher standing in
for vLLM's, a tokenizer built here, and the chat template rendered the way transformers does."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
import zmq.asyncio
from prometheus_client import REGISTRY
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from backends.pool import kv_events
from backends.pool.balance import Balancer, ReplicaState
from backends.pool.kv_events import DECODER, chain_hashes
from backends.pool.kv_router import EventsRouter, depths
from backends.pool.prefix_index import LocalRouter
from backends.pool.prompt_tokens import PromptTokens
from gateway import cli
from gateway.core.pool_report import NO_REPORT, REPLAY_STEPS, PoolReport
from gateway.core.request import ChatMessage, InternalRequest, Operation
from gateway.obs import metrics
from gateway.obs.routing import Routing
from gateway.runtime.config import ConfigError, GatewayConfig, Target, parse_config
from gateway.web.app import create_app
from tests.support import eventually

BS = 4
URLS = ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1", "http://127.0.0.1:9003/v1"]
# words the tokenizer never saw: a token every byte or two
PROMPT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer with a BOS post-processor, and a chat template, as a model directory."""
    out = tmp_path_factory.mktemp("model")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([PROMPT] * 20, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(out / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def completion(prompt: str | list[int]) -> InternalRequest:
    return InternalRequest(operation=Operation.COMPLETION, model="m", prompts=(prompt,))


def target(model_dir: Path, endpoints: list[str], replays: tuple[str, ...] = (), **balance: Any) -> Target:
    events = {"endpoints": endpoints, "replay_endpoints": replays, "tokenizer": str(model_dir)}
    return Target(provider="vllm", replicas=tuple(URLS[: len(endpoints)]), balance={"kv_events": events, **balance})


def stored(hashes: list[int], tokens: list[int], parent: int | None = None) -> bytes:
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens}
    return msgspec.msgpack.encode([0.0, [{**event, "block_size": BS, "medium": "GPU"}]])


def router_for(
    model_dir: Path, n: int = 3, report: PoolReport = NO_REPORT, **balance: Any
) -> tuple[EventsRouter, list[ReplicaState]]:
    t = target(model_dir, [f"ipc:///nowhere/{i}" for i in range(n)], **balance)
    states = [ReplicaState(u, u) for u in t.replicas]
    balancer = Balancer(states, t.balance, report)
    return EventsRouter(balancer, t, "pool", LocalRouter(balancer)), states


def hold(router: EventsRouter, replica: int, tokens: list[int], seq: int = 0) -> None:
    """The replica's engine reports storing every full block of ``tokens``."""
    view = router.events.views[replica]
    view.connected = True
    full = len(tokens) // BS * BS
    view.receive(seq, DECODER.decode(stored(list(range(1000, 1000 + full // BS)), tokens[:full])))


def test_completion_tokens_carry_the_special_tokens_and_chat_renders_the_template(model_dir: Path) -> None:
    prompts = PromptTokens(model_dir)
    ids = prompts.tokens(completion("the quick brown fox"))
    assert ids is not None and ids[0] == 0  # <s> from the post-processor
    assert prompts.tokens(completion([5, 6, 7])) == [5, 6, 7]
    chat = InternalRequest(
        operation=Operation.CHAT,
        model="m",
        messages=(ChatMessage("user", ({"type": "text", "text": "a"}, {"type": "text", "text": "b"})),),
    )
    assert prompts.render(chat) == "<s><|user|>a\nb\n<|assistant|>"
    rendered = prompts.tokens(chat)
    assert rendered == prompts.tokenizer.encode("<s><|user|>a\nb\n<|assistant|>", add_special_tokens=False).ids
    image = InternalRequest(
        operation=Operation.CHAT,
        model="m",
        messages=(ChatMessage("user", ({"type": "image_url", "image_url": {"url": "x"}},)),),
    )
    assert prompts.tokens(image) is None  # cannot be tokenized as the engine would: no events routing
    # an adapter's and a salted request's blocks are not the plain prompt's
    assert (
        prompts.tokens(InternalRequest(operation=Operation.COMPLETION, model="m", prompts=("a",), adapter="x")) is None
    )
    salted = InternalRequest(operation=Operation.COMPLETION, model="m", prompts=("a",), extra_body={"cache_salt": "s"})
    assert prompts.tokens(salted) is None


def test_a_long_prompt_cut_short_tokenizes_to_a_prefix_of_the_whole(model_dir: Path) -> None:
    text = " ".join([PROMPT, "the quick brown fox", "jumps over the lazy dog!", "x"] * 12)
    whole = PromptTokens(model_dir).tokens(completion(text))
    assert whole is not None
    for limit in range(10, len(text), 13):
        cut = PromptTokens(model_dir, max_chars=limit).tokens(completion(text))
        assert cut is not None and len(cut) < len(whole) and cut == whole[: len(cut)], limit
    assert PromptTokens(model_dir, max_chars=len(text)).tokens(completion(text)) == whole


def test_a_template_that_fails_leaves_the_chat_to_the_other_router(tmp_path: Path, model_dir: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] + 1 }}{{ raise_exception('no') }}")
    chat = InternalRequest(operation=Operation.CHAT, model="m", messages=(ChatMessage("user", "hi"),))
    assert PromptTokens(tmp_path).tokens(chat) is None


async def test_the_deepest_cached_prefix_wins_among_the_eligible(model_dir: Path) -> None:
    router, _ = router_for(model_dir)
    tokens = router.prompts.tokens(completion(PROMPT))
    assert tokens is not None and len(tokens) >= 3 * BS
    for i in range(3):
        hold(router, i, [])  # all three live, nothing cached yet
    hold(router, 1, tokens[:BS])
    hold(router, 2, tokens[: 2 * BS])
    order, _ = await router.order(completion(PROMPT), None, 0.0)
    assert order[0] == 2 and router.hits == 1
    views = router.views([0, 1, 2])
    assert views is not None and depths(views, tokens) == [0, 1, 2]


async def test_load_beyond_the_slack_outweighs_a_cached_prefix(model_dir: Path) -> None:
    router, states = router_for(model_dir, affinity_slack=1.0)
    tokens = router.prompts.tokens(completion(PROMPT))
    assert tokens is not None
    for i in range(3):
        hold(router, i, [])
    hold(router, 0, tokens)
    states[0].in_flight = 5  # far busier than the others
    order, _ = await router.order(completion(PROMPT), None, 0.0)
    assert order[0] != 0 and router.hits == 0 and router.fallbacks == 1


async def test_a_replica_not_connected_sends_the_choice_to_the_other_router(model_dir: Path) -> None:
    router, _ = router_for(model_dir, n=2)
    tokens = router.prompts.tokens(completion(PROMPT))
    assert tokens is not None
    hold(router, 0, tokens)  # replica 1's publisher never connected: the events cannot compare
    assert router.views([0, 1]) is None
    await router.order(completion(PROMPT), None, 0.0)
    assert router.hits == 0 and router.fallbacks == 1


class Scrape:
    """A pool's series as ``/metrics`` would show them: its own name, so other tests' do not count."""

    def __init__(self) -> None:
        self.routing = Routing()
        self.target = f"pool-{uuid.uuid4().hex[:8]}"
        self.report = self.routing.pool(self.target)

    def __call__(self, name: str, **labels: str) -> float:
        metrics.flush(self.routing.tallies)
        value = REGISTRY.get_sample_value(name, {"target": self.target, **labels})
        assert value is not None, (name, labels)
        return value

    def decisions(self, source: str, outcome: str) -> float:
        return self("gateway_routing_decisions_total", source=source, outcome=outcome)


async def test_the_events_decisions_and_the_fallbacks_are_counted_apart(model_dir: Path) -> None:
    scrape = Scrape()
    router, states = router_for(model_dir, report=scrape.report, affinity_slack=1.0, prefix_block_chars=16)
    tokens = router.prompts.tokens(completion(PROMPT))
    assert tokens is not None
    for i in range(3):
        hold(router, i, [])
    hold(router, 1, tokens)
    await router.order(completion(PROMPT), None, 0.0)
    assert scrape.decisions("events", "cached") == 1 and scrape.decisions("local", "new") == 0
    states[1].in_flight = 5  # too busy: the events cannot place it; the local index places it anew
    await router.order(completion(PROMPT), None, 0.0)
    assert scrape.decisions("events", "cached") == 1 and scrape.decisions("local", "new") == 1


@pytest.fixture
async def publisher(tmp_path: Path) -> AsyncIterator[tuple[zmq.asyncio.Socket, str]]:
    """vLLM's side: an XPUB (a PUB that also tells when a subscriber's subscription arrived)."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.XPUB)
    endpoint = f"ipc://{tmp_path}/kv.ipc"
    sock.bind(endpoint)
    try:
        yield sock, endpoint
    finally:
        ctx.destroy(linger=0)


async def test_the_pools_subscriber_learns_from_a_publisher_and_drops_it_when_gone(
    model_dir: Path, publisher: tuple[zmq.asyncio.Socket, str]
) -> None:
    pub, endpoint = publisher
    t = target(model_dir, [endpoint])
    scrape = Scrape()
    balancer = Balancer([ReplicaState(URLS[0], "r")], t.balance, scrape.report)
    router = EventsRouter(balancer, t, "pool", LocalRouter(balancer))
    view = router.events.views[0]
    assert not view.live  # never connected: not used
    assert scrape("gateway_kv_events_connected", replica="r") == 0
    assert scrape("gateway_kv_events_last_batch_timestamp_seconds", replica="r") == 0
    await router.start()
    try:
        assert await pub.recv() == b"\x01"  # the subscription (topic "") reached the publisher
        await eventually(lambda: view.live, "view.live")
        assert scrape("gateway_kv_events_connected", replica="r") == 1
        tokens = list(range(2 * BS))
        sent = time.time()
        await pub.send_multipart([b"", (0).to_bytes(8, "big"), stored([7, 8], tokens)])
        await eventually(lambda: len(view) == 2, "len(view) == 2")
        assert view.depth(chain_hashes(tokens, BS)) == 2
        assert scrape("gateway_kv_events_last_batch_timestamp_seconds", replica="r") >= sent
        assert scrape("gateway_kv_events_total", replica="r", kind="stored") == 1
        assert scrape("gateway_kv_events_blocks", replica="r") == 2
        pub.close(linger=0)  # the engine went away
        await eventually(lambda: not view.live, "not view.live")
        assert len(view) == 0
        assert scrape("gateway_kv_events_connected", replica="r") == 0
        assert scrape("gateway_kv_events_blocks", replica="r") == 0
    finally:
        await router.close()


def config(events: dict[str, Any], **target: Any) -> GatewayConfig:
    t = {"provider": "vllm", "replicas": URLS[:2], "balance": {"kv_events": events}, **target}
    return parse_config({"models": [{"name": "m", "targets": [t]}], "auth": "none"})


@pytest.mark.parametrize(
    ("events", "target", "error"),
    [
        ({"tokenizer": "/m"}, {}, "exactly one of 'endpoints' or 'port'"),
        ({"tokenizer": "/m", "port": 5557, "endpoints": ["tcp://a:1", "tcp://b:1"]}, {}, "exactly one of"),
        ({"tokenizer": "/m", "endpoints": ["http://a:1", "tcp://b:1"]}, {}, "must start with tcp:// or ipc://"),
        ({"tokenizer": "/m", "endpoints": ["tcp://a:1"]}, {}, "give one per replica"),
        ({"port": 5557}, {}, "tokenizer"),
        ({"tokenizer": "/m", "port": 5557}, {"replicas": [], "base_url": "http://a/v1"}, "needs 'replicas'"),
        ({"tokenizer": "/m", "port": 5557, "bogus": 1}, {}, "bogus"),
    ],
)
def test_the_config_is_refused_with_a_reason(events: dict[str, Any], target: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        config(events, **target)


def test_affinity_strategies_only() -> None:
    with pytest.raises(ConfigError, match="kv_events needs strategy prefix or kv-shared, not round-robin"):
        events = {"tokenizer": "/m", "port": 5557}
        config(events, balance={"strategy": "round-robin", "kv_events": events})


def test_check_config_names_a_missing_extra_or_tokenizer(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> None:
    good = config({"tokenizer": str(model_dir), "port": 5557})
    cli.check_extras(good, "gw.yaml")  # installed, and the tokenizer is there: nothing to say
    where = r"^gw.yaml: models\['m'\].targets\[0\].balance.kv_events"
    with pytest.raises(ConfigError, match=where + r".tokenizer: no tokenizer.json in /nowhere$"):
        cli.check_extras(config({"tokenizer": "/nowhere", "port": 5557}), "gw.yaml")
    monkeypatch.setitem(sys.modules, "zmq", None)  # a None entry makes its import fail, as if not installed
    with pytest.raises(ConfigError) as caught:
        cli.check_extras(good, "gw.yaml")
    assert str(caught.value) == (
        "gw.yaml: models['m'].targets[0].balance.kv_events: needs the optional extra:"
        " pip install 'llm-gateway[kv-events]' (zmq is missing)"
    )


def test_without_the_extra_the_app_is_not_built(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> None:
    for name in [m for m in sys.modules if m.startswith(("backends.pool.kv_router", "backends.pool.kv_events", "zmq"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "zmq", None)
    with pytest.raises(ConfigError, match=r"pip install 'llm-gateway\[kv-events\]' \(zmq is missing\)"):
        create_app(config({"tokenizer": str(model_dir), "port": 5557}))


class Publisher:
    """vLLM's two sockets as its ``ZmqEventPublisher`` drives them: batches on the XPUB (sequence
    number, then payload), and every batch sent kept for the ROUTER, which answers a replay request
    (the first sequence number wanted) with the batches it holds from there and an end marker."""

    def __init__(self, ctx: zmq.asyncio.Context, directory: Path) -> None:
        self.endpoint, self.replay_endpoint = f"ipc://{directory}/pub.ipc", f"ipc://{directory}/replay.ipc"
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.bind(self.endpoint)
        self.router = ctx.socket(zmq.ROUTER)
        self.router.bind(self.replay_endpoint)
        self.buffer: list[tuple[int, bytes]] = []
        self.requests: list[int] = []

    async def send(self, seq: int, payload: bytes, live: bool = True) -> None:
        self.buffer.append((seq, payload))
        if live:
            await self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    async def serve_replays(self) -> None:
        while True:
            client, _, start = await self.router.recv_multipart()
            self.requests.append(int.from_bytes(start, "big"))
            for seq, payload in self.buffer:
                if seq >= self.requests[-1]:
                    await self.router.send_multipart([client, b"", b"", seq.to_bytes(8, "big"), payload])
            await self.router.send_multipart([client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])


def subscribed(model_dir: Path, vllm: Publisher) -> tuple[EventsRouter, Scrape]:
    """A pool of one replica, reading ``vllm``'s events and replays, reporting as ``r``."""
    t = target(model_dir, [vllm.endpoint], (vllm.replay_endpoint,))
    scrape = Scrape()
    balancer = Balancer([ReplicaState(URLS[0], "r")], t.balance, scrape.report)
    return EventsRouter(balancer, t, "pool", LocalRouter(balancer)), scrape


async def test_a_replay_fills_the_view_on_connecting_and_across_a_gap(model_dir: Path, tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    vllm = Publisher(ctx, tmp_path)
    replays = asyncio.create_task(vllm.serve_replays())
    blocks = [list(range(i * BS, (i + 1) * BS)) for i in range(6)]
    try:
        # what the engine published before this gateway started: only a replay can tell it
        await vllm.send(0, stored([100], blocks[0]), live=False)
        await vllm.send(1, stored([101], blocks[1], parent=100), live=False)
        router, scrape = subscribed(model_dir, vllm)
        view = router.events.views[0]
        await router.start()
        try:
            assert await vllm.pub.recv() == b"\x01"
            await eventually(lambda: view.live, "view.live")
            assert vllm.requests == [0] and view.depth(chain_hashes(blocks[0] + blocks[1], BS)) == 2
            await vllm.send(2, stored([102], blocks[2], parent=101))
            await eventually(lambda: len(view) == 3, "len(view) == 3")
            # batches 3 and 4 are lost on the way (a full queue, say); 5 arrives: 3 and 4 are fetched
            await vllm.send(3, stored([103], blocks[3], parent=102), live=False)
            await vllm.send(4, stored([104], blocks[4], parent=103), live=False)
            await vllm.send(5, stored([105], blocks[5], parent=104))
            await eventually(lambda: len(view) == 6, "len(view) == 6")
            assert vllm.requests == [0, 3] and view.gaps == 0
            assert view.depth(chain_hashes([t for b in blocks for t in b], BS)) == 6
            assert router.events.replayed == 4
            steps = {s: scrape("gateway_kv_events_replays_total", replica="r", step=s) for s in REPLAY_STEPS}
            assert steps == {"asked": 2, "answered": 2, "failed": 0}
            assert scrape("gateway_kv_events_total", replica="r", kind="stored") == 6
            assert scrape("gateway_kv_events_gaps_total", replica="r") == 0
        finally:
            await router.close()
    finally:
        replays.cancel()
        await asyncio.gather(replays, return_exceptions=True)
        ctx.destroy(linger=0)


async def test_a_replay_no_one_answers_is_given_up_and_the_gap_counted(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kv_events, "REPLAY_SECONDS", 0.05)  # what is waited on is the count, not this
    ctx = zmq.asyncio.Context()
    vllm = Publisher(ctx, tmp_path)  # its replay socket is bound, and never answers
    try:
        router, scrape = subscribed(model_dir, vllm)
        view = router.events.views[0]
        await router.start()
        try:
            assert await vllm.pub.recv() == b"\x01"
            await eventually(lambda: view.live, "view.live")  # the replay on connecting was given up
            await vllm.send(0, stored([100], list(range(BS))))
            await eventually(lambda: len(view) == 1, "len(view) == 1")
            await vllm.send(2, stored([102], list(range(BS, 2 * BS))))  # 1 lost, and no replay brings it
            await eventually(lambda: view.gaps == 1, "view.gaps == 1")
            steps = {s: scrape("gateway_kv_events_replays_total", replica="r", step=s) for s in REPLAY_STEPS}
            assert steps == {"asked": 2, "answered": 0, "failed": 2}
            assert scrape("gateway_kv_events_gaps_total", replica="r") == 1
        finally:
            await router.close()
    finally:
        ctx.destroy(linger=0)
