"""vLLM's KV-cache events decoded and applied to one replica's view (``backends/pool/kv_events.py``): the
wire as vllm 0.32.0 encodes it, the view against a model of what the engine holds, gaps, bounds."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from backends.pool.kv_events import DECODER, AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch, ReplicaView
from backends.pool.kv_events import chain_hashes as chain
from backends.pool.kv_events import endpoints as publishers
from gateway.obs import metrics
from gateway.obs.routing import Routing

BS = 4  # tokens per block in these tests


def wire(*events: dict[str, Any], ts: float = 1.0) -> bytes:
    """A batch as vLLM's publisher sends it: msgspec's encoding of its array-like ``KVEventBatch`` of
    tagged (map) events, with fields this decoder does not know (vLLM adds some in every release)."""
    return msgspec.msgpack.encode([ts, list(events), 0])


def stored(hashes: list[Any], parent: Any, tokens: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": BS,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",  # not read
        "session_id": None,
        **extra,
    }


def test_decodes_vllms_batches_with_int_and_bytes_hashes() -> None:
    batch = DECODER.decode(
        wire(
            stored([11, 12], None, list(range(8))),
            {"type": "BlockRemoved", "block_hashes": [b"\x01" * 32], "medium": "GPU", "group_idx": 0},
            {"type": "AllBlocksCleared"},
        )
    )
    assert [type(e) for e in batch.events] == [BlockStored, BlockRemoved, AllBlocksCleared]
    first = batch.events[0]
    assert isinstance(first, BlockStored) and first.block_hashes == [11, 12] and first.token_ids == list(range(8))
    assert batch.events[1].block_hashes == [b"\x01" * 32]  # type: ignore[union-attr]


def test_an_unknown_event_type_does_not_decode() -> None:
    with pytest.raises(msgspec.ValidationError):
        DECODER.decode(wire({"type": "BlockMoved", "block_hashes": []}))


def test_a_prompt_matches_the_blocks_the_engine_stored() -> None:
    view = ReplicaView(100)
    tokens = list(range(10))  # two full blocks and a partial one
    view.receive(0, DECODER.decode(wire(stored([101, 102], None, tokens[:8]))))
    assert view.block_size == BS
    assert view.depth(chain(tokens, BS)) == 2
    assert view.depth(chain([0, 1, 2, 3, 9, 9, 9, 9], BS)) == 1  # shares the first block only
    assert view.depth(chain([9, *tokens], BS)) == 0
    # a child stored later chains onto its parent by vLLM's hash
    view.receive(1, DECODER.decode(wire(stored([103], 102, [8, 9, 10, 11]))))
    assert view.depth(chain([*range(12)], BS)) == 3
    view.receive(2, DECODER.decode(wire({"type": "BlockRemoved", "block_hashes": [102], "medium": "GPU"})))
    assert view.depth(chain([*range(12)], BS)) == 1  # the middle block went: the chain is cut there


def test_blocks_no_plain_prompt_can_match_are_left_out() -> None:
    view = ReplicaView(100)
    tokens = list(range(4))
    for i, extra in enumerate(
        [{"lora_id": 1, "lora_name": "a"}, {"extra_keys": [["salt"]]}, {"medium": "CPU"}, {"group_idx": 1}]
    ):
        view.receive(i, DECODER.decode(wire(stored([200 + i], None, tokens, **extra))))
    assert len(view) == 0
    view.receive(9, DECODER.decode(wire(stored([300], 999, tokens))))  # its parent was never seen
    assert len(view) == 0 and view.depth(chain(tokens, BS)) == 0


def test_a_sequence_gap_or_a_bad_batch_empties_the_view() -> None:
    view = ReplicaView(100)
    view.receive(5, DECODER.decode(wire(stored([1], None, [1, 2, 3, 4]))))  # any first number is fine
    view.receive(7, DECODER.decode(wire(stored([2], None, [5, 6, 7, 8]))))  # 6 was missed
    assert view.gaps == 1
    assert view.depth(chain([1, 2, 3, 4], BS)) == 0  # what 6 said is unknown: earlier blocks are dropped
    assert view.depth(chain([5, 6, 7, 8], BS)) == 1  # the batch after the gap still counts
    view.receive(8, None)
    assert view.gaps == 2 and len(view) == 0
    view.receive(0, DECODER.decode(wire(stored([3], None, [1, 2, 3, 4]))))  # the engine restarted: 0 again
    assert view.gaps == 3 and len(view) == 1
    view.restart()  # connected anew: any number starts the sequence
    view.receive(7, DECODER.decode(wire()))
    assert view.gaps == 3


def test_the_view_is_bounded_oldest_out_first() -> None:
    view = ReplicaView(3)
    for i in range(5):
        view.receive(i, DECODER.decode(wire(stored([i], None, [i] * BS))))
    assert len(view) == 3
    assert [view.depth(chain([i] * BS, BS)) for i in range(5)] == [0, 0, 1, 1, 1]


def test_publishers_from_a_port_follow_each_replicas_host() -> None:
    urls = ["http://10.0.0.5:8000/v1", "http://vllm-1:8000/v1", "http://[fd00::1]:8000/v1"]
    assert publishers((), 5557, urls) == ["tcp://10.0.0.5:5557", "tcp://vllm-1:5557", "tcp://[fd00::1]:5557"]
    assert publishers(("ipc:///run/a", "tcp://b:1"), None, urls[:2]) == ["ipc:///run/a", "tcp://b:1"]
    assert publishers((), None, urls[:2]) == [None, None]  # no replay socket


def test_after_a_replay_the_live_batches_it_covered_are_skipped() -> None:
    view = ReplicaView(100)
    view.receive(3, DECODER.decode(wire(stored([1], None, [1, 2, 3, 4]))), replayed=True)
    view.receive(4, DECODER.decode(wire(stored([2], None, [5, 6, 7, 8]))), replayed=True)
    assert view.missed(6) and not view.missed(5) and view.next_seq == 5
    view.receive(4, DECODER.decode(wire({"type": "AllBlocksCleared"})))  # live, already seen: not applied
    assert len(view) == 2 and view.gaps == 0
    view.receive(5, DECODER.decode(wire({"type": "AllBlocksCleared"})), replayed=True)
    view.receive(4, DECODER.decode(wire()))  # a cleared cache is no new start of the sequence
    assert len(view) == 0 and view.gaps == 0
    view.receive(6, DECODER.decode(wire(stored([1], None, [1, 2, 3, 4]))), replayed=True)
    view.receive(7, DECODER.decode(wire(stored([2], None, [5, 6, 7, 8]))), replayed=True)
    view.receive(8, DECODER.decode(wire(stored([3], None, [9, 9, 9, 9]))))
    assert len(view) == 3 and view.gaps == 0
    view.receive(1, DECODER.decode(wire()))  # older than anything replayed: the engine started again
    assert len(view) == 0 and view.gaps == 1


def test_what_the_view_takes_is_counted_for_its_replica() -> None:
    """Events applied by kind, gaps and the blocks held, on the replica's series (``gateway.obs.routing``)."""
    routing, target = Routing(), f"pool-{uuid.uuid4().hex[:8]}"
    view = ReplicaView(100, routing.pool(target).feed("r0"))

    def sample(name: str, **labels: str) -> float | None:
        metrics.flush(routing.tallies)
        return REGISTRY.get_sample_value(name, {"target": target, "replica": "r0", **labels})

    def events() -> dict[str, float | None]:
        return {k: sample("gateway_kv_events_total", kind=k) for k in ("stored", "removed", "cleared")}

    assert events() == {"stored": 0, "removed": 0, "cleared": 0} and sample("gateway_kv_events_gaps_total") == 0
    view.receive(0, DECODER.decode(wire(stored([1], None, [1, 2, 3, 4]), stored([2], 1, [5, 6, 7, 8]))))
    assert events() == {"stored": 2, "removed": 0, "cleared": 0} and sample("gateway_kv_events_blocks") == 2
    view.receive(1, DECODER.decode(wire({"type": "BlockRemoved", "block_hashes": [2], "medium": "GPU"})))
    assert events()["removed"] == 1 and sample("gateway_kv_events_blocks") == 1
    view.receive(1, DECODER.decode(wire(stored([3], None, [9, 9, 9, 9]), stored([4], None, [8, 8, 8, 8]))))
    assert sample("gateway_kv_events_gaps_total") == 1 and sample("gateway_kv_events_blocks") == 2
    view.receive(2, DECODER.decode(wire({"type": "AllBlocksCleared"})))
    assert events() == {"stored": 4, "removed": 1, "cleared": 1} and sample("gateway_kv_events_blocks") == 0
    view.receive(3, None)  # undecodable: a gap, and no event
    assert sample("gateway_kv_events_gaps_total") == 2 and events()["stored"] == 4


# -- the view against a model: what the engine holds, as token prefixes ------------------------------

Prefix = tuple[int, ...]


class Engine:
    """A model of vLLM's prefix cache as its events describe it: vLLM's hash → the token prefix it
    names (a whole prefix, as vLLM's chained hash does)."""

    def __init__(self) -> None:
        self.blocks: dict[int, Prefix] = {}
        self.seq = 0
        self._next_hash = 1

    def events(self, op: tuple[Any, ...]) -> list[dict[str, Any]]:
        kind = op[0]
        if kind == "store":
            _, parent_pick, blocks = op
            parents = [None, *sorted(self.blocks)]
            parent = parents[parent_pick % len(parents)]
            base = self.blocks[parent] if parent is not None else ()
            hashes, tokens, prefix = [], [], base
            for block in blocks:
                # vLLM names a prefix by its content: the same prefix stored again gets the same hash
                prefix = prefix + tuple(block)
                same = [h for h, p in self.blocks.items() if p == prefix]
                h = same[0] if same else self._new()
                self.blocks[h] = prefix
                hashes.append(h)
                tokens.extend(block)
            return [stored(hashes, parent, tokens)]
        if kind == "remove":
            victims = sorted(self.blocks)[:: max(1, op[1])][: op[2]]
            for h in victims:
                del self.blocks[h]
            return [{"type": "BlockRemoved", "block_hashes": victims, "medium": "GPU"}]
        self.blocks.clear()
        return [{"type": "AllBlocksCleared"}]

    def _new(self) -> int:
        self._next_hash += 1
        return self._next_hash

    def depth(self, tokens: list[int]) -> int:
        held = Counter(self.blocks.values())
        n = 0
        while (n + 1) * BS <= len(tokens) and held[tuple(tokens[: (n + 1) * BS])]:
            n += 1
        return n


blocks = st.lists(st.lists(st.integers(0, 2), min_size=BS, max_size=BS), min_size=1, max_size=3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("store"), st.integers(0, 50), blocks),
        st.tuples(st.just("remove"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.just("clear")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.lists(st.lists(st.integers(0, 2), min_size=BS * 3, max_size=BS * 3), min_size=1, max_size=5))
def test_the_view_agrees_with_the_engine_after_any_sequence(
    steps: list[tuple[Any, ...]], probes: list[list[int]]
) -> None:
    engine, view = Engine(), ReplicaView(10_000)
    for seq, op in enumerate(steps):
        view.receive(seq, DECODER.decode(wire(*engine.events(op))))
        # every prefix the engine holds, and the probes, are matched to the same depth
        for tokens in [*(list(p) for p in engine.blocks.values()), *probes]:
            assert view.depth(chain(tokens, BS)) == engine.depth(tokens), (op, tokens)
    assert len(view) == len(engine.blocks)


def test_a_batch_is_a_kv_event_batch() -> None:
    assert isinstance(DECODER.decode(wire()), KVEventBatch)
