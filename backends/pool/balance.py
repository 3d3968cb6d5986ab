"""Choosing a replica: load from the gateway's own in-flight counts and the engine's scraped gauges,
session affinity by rendezvous hashing, prefix affinity from an LRU of prompt-block hashes.

Sans-IO: the pool (``backends/pool/replicas.py``) feeds scrapes and outcomes in and asks for an order.

Load is ``max(in_flight, running + waiting) + waiting + KV_WEIGHT * kv_cache_usage``. The gateway's own
count covers the requests it sent since the last scrape (the "assumed load" of llm-d's picker); the
engine's gauges cover what other gateway replicas sent. Queued requests count twice, because a
replica with a queue adds their wait to every newcomer's time to first token; a full KV cache counts as
``KV_WEIGHT`` more, because it is about to preempt. Engine gauges older than ``stale_after`` are ignored,
unless the replica's scrapes are timing out (busy, not gone): then its last gauges still count.

Affinity (a session, or a prompt sharing its leading blocks with an earlier one) picks the sticky
replica only while its load is within ``affinity_slack`` of the least loaded one: a warm prefix cache
is worth some queueing, not unbounded queueing.

Scraped gauges are a snapshot: a replica's requests last a fraction of a second, the snapshot
``scrape_interval``. Held that long, it shows a replica that has drained as full, and every gateway
sends the next requests elsewhere (the herd that a prefix's home keeps losing to). ``kv-shared`` counts
every gateway's in-flight requests in Redis instead (``backends/pool/prefix_index.py``); its load is
``shared_load``: that count, plus the queue beyond the largest batch the engine was seen running, plus
``KV_WEIGHT * kv_cache_usage``, and ``Balancer.counted_order`` is the Lua script's choice written in Python.

``strategy`` picks among ``round-robin`` and ``least-loaded`` (no affinity: the benchmark's baselines),
``prefix`` (the above, with this process's own prefix index) and ``kv-shared`` (the same, against an
index every gateway replica shares: ``backends/pool/prefix_index.py``, which asks ``plan`` for the candidates).
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.core.pool_report import NO_REPORT, Outcome, PoolReport, affinity
from gateway.core.request import InternalRequest
from gateway.runtime.config import Balance

KV_WEIGHT = 4.0
FAILURE_COOLDOWN = 5.0  # seconds a replica that failed before the first byte is passed over
HOME = 1000  # a new prefix's weight in ``PrefixIndex.homes``: integers, so that Lua and Python agree exactly


@dataclass(slots=True)
class ReplicaState:
    url: str
    label: str  # bounded metric label: from the config
    healthy: bool = True  # from /health; a replica is presumed up until a scrape says otherwise
    in_flight: int = 0
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    scraped_at: float = float("-inf")  # time.monotonic() of the last good /metrics read
    cool_until: float = 0.0
    slow_scrapes: int = 0  # scrapes in a row that timed out
    answered_at: float = float("-inf")  # time.monotonic() of the last scrape that was answered
    batch: float = 0.0  # the most requests the engine was seen running at once: where its queue starts

    def available(self, now: float) -> bool:
        return self.healthy and now >= self.cool_until

    def load(self, now: float, stale_after: float) -> float:
        engine = max(self.in_flight, self.running + self.waiting) + self.waiting + KV_WEIGHT * self.kv_usage
        if self.slow_scrapes:
            # Its scrapes time out: an engine too busy to answer them. Its last gauges (however old:
            # they may predate the rush) and one more request's worth per slow scrape are a better
            # guess than our own count alone.
            return engine + self.slow_scrapes
        if now - self.scraped_at <= stale_after:
            return engine
        return float(self.in_flight)

    def extra(self, now: float, stale_after: float) -> float:
        """What ``shared_load`` adds to the requests in flight: the engine's KV-cache use (and, while its
        scrapes time out, one request per slow scrape), not its request gauges, which the count replaces."""
        if self.slow_scrapes:
            return KV_WEIGHT * self.kv_usage + self.slow_scrapes
        return KV_WEIGHT * self.kv_usage if now - self.scraped_at <= stale_after else 0.0


def shared_load(count: int, extra: float, batch: float) -> float:
    """A replica's load from every gateway's in-flight ``count``: the requests beyond ``batch`` queue, and
    count twice as in ``ReplicaState.load``. The operations in the Lua script's order, so both agree to
    the last bit."""
    load = count + extra
    if batch > 0 and count > batch:
        load = load + count - batch
    return load


def stable_hash(text: str) -> int:
    """The same across processes (``hash()`` is salted per process); sessions must agree across replicas
    of the gateway. ``surrogatepass``: a session header's bytes that are not UTF-8 arrive as lone
    surrogates (aiohttp's ``surrogateescape``), and hash as any other session's."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def prompt_text(request: InternalRequest) -> str | None:
    """What a prefix cache would share: the first prompt, or the chat transcript as sent."""
    if request.prompts:
        first = request.prompts[0]
        return first if isinstance(first, str) else ",".join(map(str, first))
    if request.messages:
        return "\x1e".join(f"{m.role}\x1f{m.content}" for m in request.messages)
    return None


def block_hashes(text: str, block: int) -> list[int]:
    """Chained hashes of the prompt's full blocks: equal hashes mean equal prefixes up to that block,
    which is what an engine's prefix cache can reuse (it caches full blocks only). The same in every
    process (``hash()`` is salted per process), so gateway replicas can share them."""
    out: list[int] = []
    running = hashlib.blake2b(digest_size=8)
    for start in range(0, len(text) - block + 1, block):
        running.update(text[start : start + block].encode())
        out.append(int.from_bytes(running.copy().digest(), "big"))
    return out


class PrefixIndex:
    """Block hash → the replicas that served it and how often; bounded, least recently used out first.

    Every replica a prefix went to is kept, not only the last: a request that yields to load makes a
    second copy, and forgetting the first would send the prefix back and forth and keep it in every
    replica's cache at once (where, in a cache smaller than the working set, it is evicted in turn)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._where: OrderedDict[int, dict[int, int]] = OrderedDict()
        self.homes: dict[int, int] = {}  # replica → new prefixes lately sent there (``prefer``, ``placed``)

    def placed(self, replica: int, replicas: int) -> None:
        """A new prefix went to ``replica``, one of ``replicas`` available. Earlier placements fade, by
        1/(2 * replicas) each time: the last few per replica count, the prefixes still likely in use (a
        conversation ends; a replica added later is not flooded until its all-time count catches up)."""
        fade = 2 * replicas
        self.homes = {i: n * (fade - 1) // fade for i, n in self.homes.items()}
        self.homes[replica] = self.homes.get(replica, 0) + HOME

    def lookup(self, hashes: list[int], candidates: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Per candidate, how many leading blocks it served (``depth``) and how often it served the
        deepest of them (``uses``); candidates with no leading block are left out."""
        depth: dict[int, int] = {}
        uses: dict[int, int] = {}
        alive = candidates
        for k, h in enumerate(hashes, 1):
            served = self._where.get(h, {})
            alive = [i for i in alive if i in served]
            if not alive:
                break
            for i in alive:
                depth[i], uses[i] = k, served[i]
        return depth, uses

    def record(self, hashes: list[int], replica: int) -> None:
        for h in hashes:
            served = self._where.setdefault(h, {})
            served[replica] = served.get(replica, 0) + 1
            self._where.move_to_end(h)
        while len(self._where) > self.capacity:
            self._where.popitem(last=False)

    def forget(self, replica: int) -> None:
        for h in list(self._where):
            served = self._where[h]
            served.pop(replica, None)
            if not served:
                del self._where[h]

    def __len__(self) -> int:
        return len(self._where)


def prefer(
    candidates: list[int],
    depth: dict[int, int],
    uses: dict[int, int],
    homes: dict[int, int],
    hints: dict[int, int] | None = None,
) -> int:
    """The candidate holding the most leading blocks by vLLM's own report (``hints``, from its KV-cache
    events, when there are any); then the one with the deepest cached prefix in the index; among equals
    the one that served it most often (its home: a request that yielded to load elsewhere does not move
    it); a new prefix to the one that is home to the fewest lately (so that the prefixes, hence the load,
    are shared out evenly: least loaded at the moment of a prefix's first request is a noisy pick for all
    its later ones); then the first candidate (``Plan.candidates``). ``backends/pool/prefix_index.py``'s
    script makes the same choice in Redis."""
    seen = hints or {}
    return max(candidates, key=lambda i: (seen.get(i, 0), depth.get(i, 0), uses.get(i, 0), -homes.get(i, 0)))


def shared_candidates(loads: list[float], slack: float, session: int | None) -> list[int]:
    """``Plan.candidates`` by shared loads (positions in ``loads``, which is in the plan's ranked order):
    the session's replica if it is within ``slack`` of the least loaded, then the others that are, least
    loaded first, ties in the given order. The Lua script's rule."""
    least = min(loads)
    eligible = sorted((i for i, load in enumerate(loads) if load <= least + slack), key=lambda i: (loads[i], i))
    if session is None or session not in eligible:
        return eligible
    return [session, *(i for i in eligible if i != session)]


def outcome(plan: Plan, choice: int, depth: int, deepest: int) -> Outcome:
    """What decided a choice by counted loads (``Balancer.counted_order``, the shared script): the
    prefix, when the prompt has a full block or the events saw one; else the session, or load alone."""
    if plan.hashes or deepest:
        return affinity(depth, deepest)
    return "session" if choice == plan.session else "no_affinity"


@dataclass(slots=True)
class Plan:
    """One request's candidates: ``ranked`` (available, best first), ``down`` (last resorts), the prompt's
    block ``hashes``, ``sticky`` (its session's replica, if that is eligible) and ``eligible`` (the
    replicas near enough the least loaded for affinity to win there)."""

    ranked: list[int]
    down: list[int]
    hashes: list[int] = field(default_factory=list)
    sticky: int | None = None
    eligible: list[int] = field(default_factory=list)
    session: int | None = None  # the session's replica, eligible or not (the shared loads may differ)

    @property
    def candidates(self) -> list[int]:
        """Where affinity may send the request, by preference when no prefix decides: the session's
        replica, then the least loaded."""
        if self.sticky is None:
            return self.eligible
        return [self.sticky, *(i for i in self.eligible if i != self.sticky)]

    def first(self, replica: int) -> list[int]:
        """The order with ``replica`` tried first."""
        ranked = [replica, *(i for i in self.ranked if i != replica)] if replica in self.ranked else self.ranked
        return ranked + self.down


class Balancer:
    """The order in which to try a pool's replicas for one request."""

    def __init__(self, replicas: list[ReplicaState], settings: Balance, report: PoolReport = NO_REPORT) -> None:
        self.replicas = replicas
        self.settings = settings
        self.report = report  # each request's decision, by whichever of the pool's routers made it
        self.prefixes = PrefixIndex(settings.prefix_capacity)
        self._salts = [stable_hash(r.url) for r in replicas]
        self._turn = 0  # round-robin's next replica

    def _session_pick(self, session: str, candidates: list[int]) -> int:
        """Rendezvous hashing: the replica with the highest score for this session; when one goes down
        only its sessions move."""
        key = stable_hash(session)
        return max(candidates, key=lambda i: stable_hash(f"{key}:{self._salts[i]}"))

    def plan(self, request: InternalRequest, session: str | None, now: float) -> Plan:
        """The candidates before any prefix index is asked (``order`` asks the local one)."""
        s = self.settings
        loads = [r.load(now, s.stale_after) for r in self.replicas]
        up = [i for i, r in enumerate(self.replicas) if r.available(now)]
        down = [i for i in range(len(self.replicas)) if i not in up]
        if not up:
            return Plan(ranked=[], down=sorted(down, key=loads.__getitem__))
        if s.strategy == "round-robin":
            self._turn += 1
            start = self._turn % len(up)
            return Plan(ranked=up[start:] + up[:start], down=down)
        # Least loaded first; ties broken at random so equal replicas share the work.
        jitter = {i: random.random() for i in up}
        ranked = sorted(up, key=lambda i: (loads[i], jitter[i]))
        if s.strategy == "least-loaded":
            return Plan(ranked=ranked, down=down)
        least = loads[ranked[0]]
        eligible = [i for i in ranked if loads[i] <= least + s.affinity_slack]
        text = prompt_text(request)
        hashes = block_hashes(text, s.prefix_block_chars) if text is not None else []
        key = session or request.user
        sticky = self._session_pick(key, up) if key else None
        return Plan(ranked, down, hashes, sticky if sticky in eligible else None, eligible, sticky)

    def order(self, request: InternalRequest, session: str | None, now: float) -> tuple[list[int], list[int]]:
        """Replica indexes, best first (the unavailable ones last, as a last resort), and the prompt's
        block hashes to ``record`` once a replica has answered."""
        plan = self.plan(request, session, now)
        return self.local_order(plan), plan.hashes

    def local_order(self, plan: Plan) -> list[int]:
        """The order by this process's own prefix index. A cached prefix outranks a session, as in the
        shared index: a conversation's own turns lead back to where it runs anyway."""
        if plan.hashes:  # none under round-robin and least-loaded
            # every available replica's depth (``prefer`` reads the candidates'), to tell a yield
            depth, uses = self.prefixes.lookup(plan.hashes, plan.ranked)
            choice = prefer(plan.candidates, depth, uses, self.prefixes.homes)
            if choice not in depth:
                self.prefixes.placed(choice, len(plan.ranked))
            self.report.routed("local", affinity(depth.get(choice, 0), max(depth.values(), default=0)))
            return plan.first(choice)
        if plan.sticky is not None:
            self.report.routed("local", "session")
            return plan.first(plan.sticky)
        self.report.routed("local", "no_affinity")
        return plan.ranked + plan.down

    def counted_order(
        self, plan: Plan, counts: list[int], now: float, hints: dict[int, int] | None = None
    ) -> list[int]:
        """The order by every gateway's in-flight ``counts`` (per replica of ``plan.ranked``) and this
        process's prefix index: what ``backends/pool/prefix_index.py``'s script chooses from Redis's, written
        in Python (the tests replay both), as ``local_order`` is for ``prefix``."""
        s = self.settings
        loads = [
            shared_load(n, self.replicas[i].extra(now, s.stale_after), self.replicas[i].batch)
            for n, i in zip(counts, plan.ranked, strict=True)
        ]
        session = plan.ranked.index(plan.session) if plan.session in plan.ranked else None
        candidates = [plan.ranked[k] for k in shared_candidates(loads, s.affinity_slack, session)]
        depth, uses = self.prefixes.lookup(plan.hashes, candidates)
        # Homes place new prefixes; a prompt without a full block has none to place: its session decides.
        choice = prefer(candidates, depth, uses, self.prefixes.homes if plan.hashes else {}, hints)
        if plan.hashes and choice not in depth and not (hints or {}).get(choice):
            self.prefixes.placed(choice, len(plan.ranked))
        held = hints or depth
        self.report.routed("local", outcome(plan, choice, held.get(choice, 0), max(held.values(), default=0)))
        return plan.first(choice)

    def record(self, hashes: list[int], replica: int) -> None:
        if hashes:
            self.prefixes.record(hashes, replica)
