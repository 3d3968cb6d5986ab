"""What each vLLM replica of a pool holds in its prefix cache, learned from vLLM's KV-cache events
(``--kv-events-config``: a ZMQ PUB socket sending ``(topic, seq, msgpack KVEventBatch)``).

``ReplicaView`` is sans-IO: it takes decoded batches with their sequence numbers and answers how many
leading blocks of a tokenized prompt the replica holds. It names blocks by its own chained hash of
the blocks' token ids (``chain_hashes``), never by vLLM's (whose seed and algorithm are the engine's
business); a map from vLLM's hash to ours applies ``BlockRemoved``. A sequence gap (the socket's queue
overflowed, or the engine restarted) or an undecodable batch empties the view: it then under-reports
until new events fill it again, which costs cache hits, never a wrong "it is cached".

``PoolEvents`` is the IO shell the pool owns: one subscriber per replica, all in one task started and
stopped with the pool, never on the request path. ZMQ reconnects by itself; a socket monitor tells
when a replica's publisher is connected, and a view is ``live`` only while it is. With the publisher's
replay socket configured, a connection first fetches what the publisher still buffers, and a gap is
fetched again before the view would have to be emptied. What routes on the
views is ``backends/pool/kv_router.py``; the prompt's tokens come from ``backends/pool/prompt_tokens.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from array import array
from collections import Counter, OrderedDict
from typing import Any
from urllib.parse import urlsplit

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from gateway.core.pool_report import NO_REPORT, FeedReport
from gateway.runtime.config import KvEvents
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.kv_events")
ROOT = 0  # the parent of a prompt's first block
REPLAY_SECONDS = 5.0  # a replay not finished by then is given up: the view starts from the next batch
PRIMARY = (None, "GPU")  # the engine's own block pool (also on CPU builds); offload tiers are not read

VllmHash = bytes | int  # vLLM's ExternalBlockHash: int with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, else bytes


# -- the wire: vllm/distributed/kv_events.py (vllm 0.32.0), the fields we read --------------------------
# Events are tagged maps ({"type": "BlockStored", ...}); unknown fields are ignored, so fields vLLM
# adds later do not break decoding.


class BlockStored(msgspec.Struct, tag=True):
    block_hashes: list[VllmHash]
    parent_block_hash: VllmHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None  # cache_salt, multimodal ids: blocks no plain prompt matches
    group_idx: int | None = None


class BlockRemoved(msgspec.Struct, tag=True):
    block_hashes: list[VllmHash]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


DECODER = msgspec.msgpack.Decoder(KVEventBatch)
# What applying a decoded batch raises on values of the right type but out of any engine's range (a
# token id of 2**64 - 1 does not fit the chain hash's int64 blocks; a block size of 0 or below).
BAD_VALUES = (OverflowError, ValueError, TypeError, ZeroDivisionError)
RESTART_SECONDS = 1.0  # a subscriber that failed is started again after this long


def chain_hashes(tokens: list[int], block_size: int, parent: int = ROOT) -> list[int]:
    """Our chained hash of each full block of ``tokens``: equal hashes mean equal token prefixes up to
    that block. The same function names the engine's blocks and the prompt's, so they meet."""
    out: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = array("q", tokens[start : start + block_size]).tobytes()
        parent = int.from_bytes(hashlib.blake2b(parent.to_bytes(8, "big") + block, digest_size=8).digest(), "big")
        out.append(parent)
    return out


class ReplicaView:
    """The blocks one replica holds, as our hashes; bounded at ``capacity`` blocks, oldest out first
    (forgetting a block only costs a hit)."""

    def __init__(self, capacity: int, feed: FeedReport = NO_REPORT) -> None:
        self.capacity = capacity
        self.feed = feed  # what operators see of it: events taken, gaps, blocks held
        self.block_size: int | None = None  # from the first stored block
        self.connected = False
        self.gaps = 0  # times the view was emptied because batches were missed or undecodable
        self._ours: OrderedDict[VllmHash, int] = OrderedDict()  # vLLM's hash → ours
        self._held: Counter[int] = Counter()  # ours → how many of vLLM's blocks carry it
        self._next_seq: int | None = None
        self._replayed_from: int | None = None  # the first batch a replay applied since the last restart

    @property
    def live(self) -> bool:
        return self.connected

    def __len__(self) -> int:
        return len(self._ours)

    def __repr__(self) -> str:
        return f"ReplicaView(connected={self.connected}, blocks={len(self)}, size={self.block_size}, gaps={self.gaps})"

    def depth(self, hashes: list[int]) -> int:
        """How many leading blocks of a prompt (``chain_hashes`` of its tokens) are cached here."""
        n = 0
        for h in hashes:
            if not self._held.get(h):
                break
            n += 1
        return n

    def clear(self) -> None:
        self._ours.clear()
        self._held.clear()
        self.feed.held(0)

    def restart(self) -> None:
        """Connected anew (or not at all): forget the blocks and where the sequence was."""
        self.clear()
        self.block_size = None
        self._next_seq = None
        self._replayed_from = None

    @property
    def next_seq(self) -> int | None:
        return self._next_seq

    def missed(self, seq: int) -> bool:
        """Batches before ``seq`` were not seen (a replay can fetch them)."""
        return self._next_seq is not None and seq > self._next_seq

    def receive(self, seq: int, batch: KVEventBatch | None, replayed: bool = False) -> bool:
        """One published batch (``None``: it did not decode). A batch other than the next one means
        some were missed: what they said is unknown, so the view starts again from this one. A live
        batch that a replay already applied is skipped. False when the batch could not be taken (it
        did not decode, a negative sequence number, a value no engine sends): the view starts again
        and the sequence with it."""
        if seq < 0:  # vLLM counts from 0; a negative number is no batch of its (a replay's end marker)
            self._lost()
            self._next_seq = None
            return False
        if self._replayed_from is not None and self._replayed_from <= seq < (self._next_seq or 0) and not replayed:
            return True
        if batch is None or (self._next_seq is not None and seq != self._next_seq):
            self._lost()
        if replayed and self._replayed_from is None:
            self._replayed_from = seq
        self._next_seq = seq + 1
        if batch is None:
            return False
        try:
            for event in batch.events:
                self.apply(event)
        except BAD_VALUES:  # a token id past 64 bits, a block size of 0: what was applied is suspect too
            self._lost()
            return False
        self.feed.held(len(self._ours))
        return True

    def _lost(self) -> None:
        """What the view holds can no longer be trusted: emptied, and counted as a gap."""
        self.gaps += 1
        self.feed.gap()
        self.clear()
        self._replayed_from = None
        self.block_size = None  # learnt again from the next stored block: the view is empty anyway

    def apply(self, event: BlockStored | BlockRemoved | AllBlocksCleared) -> None:
        if isinstance(event, BlockStored):
            self.feed.applied("stored")
            self._stored(event)
        elif isinstance(event, BlockRemoved):
            self.feed.applied("removed")
            if event.medium in PRIMARY and event.group_idx in (None, 0):
                for vh in event.block_hashes:
                    self._drop(vh)
        else:
            self.feed.applied("cleared")
            self.clear()

    def _stored(self, event: BlockStored) -> None:
        # Blocks of an adapter, a cache salt or images match no plain prompt; a second KV group (hybrid
        # models) or an offload tier is not what the engine reuses first.
        if event.lora_id is not None or event.lora_name is not None or event.medium not in PRIMARY:
            return
        if event.group_idx not in (None, 0) or (event.extra_keys and any(k for k in event.extra_keys)):
            return
        if event.block_size < 1:
            raise ValueError("block size below 1")
        if self.block_size is None:
            self.block_size = event.block_size
        if event.block_size != self.block_size:
            return
        if event.parent_block_hash is None:
            parent = ROOT
        else:
            known = self._ours.get(event.parent_block_hash)
            if known is None:
                return  # its parent was stored before we listened (or forgotten): it cannot be chained
            parent = known
        ours = chain_hashes(event.token_ids, event.block_size, parent)
        for vh, h in zip(event.block_hashes, ours, strict=False):
            self._drop(vh)
            self._ours[vh] = h
            self._held[h] += 1
        while len(self._ours) > self.capacity:
            self._drop(next(iter(self._ours)))

    def _drop(self, vh: VllmHash) -> None:
        h = self._ours.pop(vh, None)
        if h is not None:
            self._held[h] -= 1
            if self._held[h] <= 0:
                del self._held[h]


def endpoints(listed: tuple[str, ...], port: int | None, replicas: list[str]) -> list[str | None]:
    """Each replica's socket: as listed, or the replica's own host at ``port``, or none."""
    if listed:
        return list(listed)
    out: list[str | None] = []
    for url in replicas:
        host = urlsplit(url).hostname or "127.0.0.1"
        out.append(None if port is None else f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}")
    return out


class PoolEvents:
    """The views of a pool's replicas, kept current by one background task while the pool runs."""

    def __init__(
        self, settings: KvEvents, replicas: list[str], name: str, feeds: list[FeedReport] | None = None
    ) -> None:
        """``feeds``: each replica's report, in ``replicas`` order (none: nothing is reported)."""
        self.settings = settings
        self.name = name
        self.endpoints = endpoints(settings.endpoints, settings.port, replicas)
        self.replays = endpoints(settings.replay_endpoints, settings.replay_port, replicas)
        self.views = [ReplicaView(settings.max_blocks, feed) for feed in feeds or [NO_REPORT] * len(replicas)]
        self.replayed = 0  # batches fetched from the publishers' replay sockets
        self._ctx: zmq.asyncio.Context | None = None
        self._task: asyncio.Task[None] | None = None

    def live(self, replicas: list[int]) -> bool:
        return all(self.views[i].live for i in replicas)

    async def start(self) -> None:
        if self._task is None:
            self._ctx = zmq.asyncio.Context()
            self._task = asyncio.create_task(self._run(), name=f"kv events {self.name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None
        for view in self.views:
            view.connected = False
            view.restart()

    async def _run(self) -> None:
        assert self._ctx is not None
        async with asyncio.TaskGroup() as group:
            for endpoint, replay, view in zip(self.endpoints, self.replays, self.views, strict=True):
                assert endpoint is not None  # the config gives endpoints or port
                group.create_task(self._keep(_Subscriber(self, self._ctx, endpoint, replay, view)))

    async def _keep(self, sub: _Subscriber) -> None:
        """One replica's subscriber, started again if it fails: a fault of one feed must not end the
        others (they share this task group), nor leave its view live on a dead reader."""
        while True:
            try:
                await sub.run()
            except Exception as exc:
                while isinstance(exc, ExceptionGroup):  # the subscriber's own task group: say what failed in it
                    exc = exc.exceptions[0]
                sub.view.connected = False
                sub.view.restart()
                sub.view.feed.connected(False)
                sub.throttle.error(
                    "failed",
                    "kv events of %s from %s: the reader failed (%s); started again in %.0f s",
                    self.name,
                    sub.endpoint,
                    type(exc).__name__,
                    RESTART_SECONDS,
                )
                await asyncio.sleep(RESTART_SECONDS)


class _Subscriber:
    """One replica's publisher: the live batches, the socket monitor, and the replay socket if any.
    A lock keeps a replay and the live batches from interleaving in the view."""

    def __init__(
        self, pool: PoolEvents, ctx: zmq.asyncio.Context, endpoint: str, replay: str | None, view: ReplicaView
    ) -> None:
        self.pool = pool
        self.ctx = ctx
        self.endpoint = endpoint
        self.replay = replay
        self.view = view
        self.lock = asyncio.Lock()
        self.throttle = LogThrottle(log)  # a publisher can send a bad batch a millisecond: a line a period

    async def run(self) -> None:
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, self.pool.settings.hwm)  # the bounded queue: overflow is a gap
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, self.pool.settings.topic.encode())
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sock.connect(self.endpoint)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._watch(monitor))
                group.create_task(self._read(sock))
        finally:
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)

    async def _watch(self, monitor: zmq.asyncio.Socket) -> None:
        """Connected: a fresh view (what the replay socket still has, if any) is live. Disconnected
        (the engine went away): not live."""
        view = self.view
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())
            connected = event["event"] == zmq.EVENT_CONNECTED
            if connected != view.connected:
                state = "connected to" if connected else "lost"
                log.info("kv events of %s: %s %s", self.pool.name, state, self.endpoint)
            async with self.lock:
                view.connected = False
                view.restart()
                if connected:
                    await self._replay(0, None)
                view.connected = connected
                view.feed.connected(connected)

    async def _read(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3 or len(frames[1]) != 8:
                continue  # not vLLM's (topic, seq, payload)
            seq, batch = self._decode(frames[1], frames[2])
            self.view.feed.heard()
            async with self.lock:
                start, gaps = self.view.next_seq, self.view.gaps
                if start is not None and self.view.missed(seq):
                    await self._replay(start, seq)
                taken = self.view.receive(seq, batch)
            if not taken and batch is not None:
                what = "kv events of %s from %s: batch %d not taken (sequence or values out of range); view emptied"
                self.throttle.warning("bad", what, self.pool.name, self.endpoint, seq)
            elif self.view.gaps != gaps and batch is not None:
                what = "kv events of %s from %s: batches lost before %d; its view starts again"
                self.throttle.warning("lost", what, self.pool.name, self.endpoint, seq)

    def _decode(self, seq_bytes: bytes, payload: bytes) -> tuple[int, KVEventBatch | None]:
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        try:
            return seq, DECODER.decode(payload)
        except msgspec.MsgspecError as exc:
            what = "kv events of %s from %s: undecodable batch %d (%s)"
            self.throttle.warning("undecodable", what, self.pool.name, self.endpoint, seq, str(exc)[:200])
            return seq, None

    async def _replay(self, start: int, before: int | None) -> None:
        """The batches from ``start`` (up to ``before``) that the publisher still buffers, from its
        replay socket (vLLM's ROUTER: a request of the first sequence number, the batches, an end
        marker of -1). A replay that fails or is slow leaves the gap to ``receive``."""
        if self.replay is None:
            return
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay)
        try:
            async with asyncio.timeout(REPLAY_SECONDS):
                self.view.feed.replay("asked")
                await sock.send_multipart([b"", start.to_bytes(8, "big")])
                while True:
                    frames = await sock.recv_multipart()  # b"", topic, seq, payload
                    if len(frames) != 4 or len(frames[2]) != 8:
                        continue
                    if int.from_bytes(frames[2], "big", signed=True) < 0:
                        self.view.feed.replay("answered")
                        return  # the end marker, whose payload is empty, not a batch
                    seq, batch = self._decode(frames[2], frames[3])
                    if before is None or seq < before:
                        self.view.receive(seq, batch, replayed=True)
                        self.pool.replayed += 1
        except TimeoutError:
            self.view.feed.replay("failed")
            log.warning("kv events of %s: no replay from %s in %.0f s", self.pool.name, self.replay, REPLAY_SECONDS)
        finally:
            sock.close(linger=0)
