"""A pool of replicas of one model server (``vllm serve`` endpoints), behind one target.

Each replica is an ``Upstream`` speaking the target's wire, made by the factory the app passes in
(the HTTP adapter). A background task scrapes every replica's ``/health`` and ``/metrics`` (vLLM's
``num_requests_running``, ``num_requests_waiting``, ``kv_cache_usage_perc``) every ``scrape_interval``
seconds, never on the request path; the choice itself is ``backends/pool/balance.py``. A replica that
fails before the first byte is passed over for a few seconds and the request goes to the next one;
once a stream has started, it stays where it is.
Closing a stream (the client went away) closes its upstream connection, which aborts it in vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp

from backends.pool.balance import FAILURE_COOLDOWN, Balancer, ReplicaState
from backends.pool.prefix_index import router
from gateway.core.errors import GatewayError, UpstreamFailed, UpstreamRejected
from gateway.core.pool_report import NO_REPORT, PoolReport
from gateway.core.request import InternalRequest
from gateway.core.response import Batch, Completion, StreamEvent
from gateway.core.upstream import Call, Identity, NoGauges, ReplicaGauges, Upstream
from gateway.dialects.base import Wire
from gateway.runtime.config import ConfigError, Target
from gateway.runtime.throttle import LogThrottle

if TYPE_CHECKING:
    from backends.pool.kv_router import EventsRouter, Router

log = logging.getLogger("gateway.replicas")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind
# Makes one replica's upstream: (its target, the public model name, the wire it speaks).
MemberFactory = Callable[[Target, str, Wire], Upstream]
# A replica whose scrapes time out is busy, not gone, until it has been silent this long (and this many
# scrapes): a short scrape interval must not turn a few starved seconds into "down".
SLOW_SCRAPES_TO_DOWN = 3
SILENT_SECONDS_TO_DOWN = 10.0
GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",  # the older name of the same gauge
}


def read_gauges(text: str) -> dict[str, float]:
    """The load gauges from a Prometheus text exposition: only the few lines we need are looked at
    (vLLM's full page is hundreds of lines of histograms). Series of one gauge are summed (several
    engines or models behind one server); KV usage takes the highest."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{") if "{" in line.split(" ", 1)[0] else line.partition(" ")
        field = GAUGES.get(name)
        if field is None:
            continue
        try:
            value = float(rest.rsplit("}", 1)[-1].split()[0])
        except (IndexError, ValueError):
            continue
        out[field] = max(out.get(field, 0.0), value) if field == "kv_usage" else out.get(field, 0.0) + value
    return out


def server_root(base_url: str) -> str:
    """``http://host:8000/v1`` → ``http://host:8000``: where ``/health`` and ``/metrics`` live."""
    return base_url.removesuffix("/v1")


def replica_label(target: str, url: str) -> str:
    return f"{target}@{urlsplit(url).netloc}"


def _retry_elsewhere(err: GatewayError, call: Call) -> bool:
    if not err.retryable or (isinstance(err, UpstreamRejected) and err.status != 429):
        return False
    left = call.remaining()
    return left is None or left > 0


class ReplicaPool(Identity[Target]):
    """One target, several replicas; an ``Upstream`` to the rest of the gateway."""

    def __init__(
        self,
        target: Target,
        public_model: str,
        wire: Wire,
        member: MemberFactory,
        gauges: ReplicaGauges | None = None,
        shared: Any | None = None,
        reports: Callable[[str], PoolReport] | None = None,
    ) -> None:
        """``shared``: the Redis client holding the prefix index of ``balance.strategy: kv-shared``;
        ``reports``: the app's routing reports, which give the pool's by its target id."""
        self.identify(target, public_model)
        self.members = [
            member(
                target.model_copy(update={"base_url": url, "replicas": (), "name": replica_label(self._name, url)}),
                public_model,
                wire,
            )
            for url in target.replicas
        ]
        self._features = self.members[0].features  # replicas of one model server serve the same
        self.states = [ReplicaState(url, m.name) for url, m in zip(target.replicas, self.members, strict=True)]
        self.balancer = Balancer(self.states, target.balance, reports(self._name) if reports else NO_REPORT)
        self.index = index = router(self.balancer, self._name, list(target.replicas), shared)
        self.router: Router = index
        # A request's lease in the shared in-flight counts: the pool's own id and a serial number. Made
        # here, in the worker that serves, not at import: forked workers would share a module's id.
        self._lease_id = uuid.uuid4().hex[:12]
        self._serial = itertools.count()
        self.kv_events: EventsRouter | None = None
        if target.balance.kv_events is not None:
            # imported here: its packages (the kv-events extra) are needed only by pools that use it
            try:
                from backends.pool.kv_router import EventsRouter
            except ImportError as exc:
                extra = f"pip install 'llm-gateway[kv-events]' ({exc.name} is missing)"
                raise ConfigError(f"balance.kv_events: needs the optional extra: {extra}") from None
            self.kv_events = self.router = EventsRouter(self.balancer, target, self._name, index)
        self.gauges = gauges or NoGauges()
        self._scraper: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._scraper is None:
            balance = self.target.balance
            timeout = aiohttp.ClientTimeout(total=balance.scrape_timeout or max(1.0, 2 * balance.scrape_interval))
            self._http = aiohttp.ClientSession(timeout=timeout)
            await self.scrape()  # know the replicas before the first request
            self._scraper = asyncio.create_task(self._scrape_forever(), name=f"scrape {self.name}")
            await self.index.start()
            if self.kv_events is not None:
                await self.kv_events.start()

    async def close(self) -> None:
        await self.index.close()
        if self.kv_events is not None:
            await self.kv_events.close()
        if self._scraper is not None:
            self._scraper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scraper
            self._scraper = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        await asyncio.gather(*(m.close() for m in self.members))

    # -- scraping --------------------------------------------------------------------------------

    async def _scrape_forever(self) -> None:
        while True:
            await asyncio.sleep(self.target.balance.scrape_interval)
            try:
                await self.scrape()
            except Exception:  # a scrape must never end the scraper
                log.exception("scrape of %s failed", self.name)

    async def scrape(self) -> None:
        await asyncio.gather(*(self._scrape_one(s) for s in self.states))

    async def _scrape_one(self, state: ReplicaState) -> None:
        assert self._http is not None
        root = server_root(state.url)
        gauges: dict[str, float] = {}
        try:
            async with self._http.get(root + "/health") as resp:
                healthy = resp.status == 200
            if healthy:
                async with self._http.get(root + "/metrics") as resp:
                    if resp.status == 200:
                        gauges = read_gauges(await resp.text())
            state.slow_scrapes = 0
            state.answered_at = time.monotonic()
        except TimeoutError:
            # A busy engine answers slowly; that is load (the balancer adds it), not death, until it
            # stays silent for several scrapes and seconds in a row.
            state.slow_scrapes += 1
            silent = time.monotonic() - state.answered_at
            healthy = state.healthy and (state.slow_scrapes < SLOW_SCRAPES_TO_DOWN or silent < SILENT_SECONDS_TO_DOWN)
        except aiohttp.ClientError:
            healthy = False
        if healthy != state.healthy:
            log.info("replica %s is %s", state.label, "up" if healthy else "down")
        state.healthy = healthy
        self.gauges.replica_up(self.name, state.label, healthy)
        if gauges:
            state.running = gauges.get("running", 0.0)
            state.waiting = gauges.get("waiting", 0.0)
            state.kv_usage = gauges.get("kv_usage", 0.0)
            state.batch = max(state.batch, state.running)
            state.scraped_at = time.monotonic()
            self.gauges.replica_load(self.name, state.label, state.running, state.waiting, state.kv_usage)

    # -- serving ---------------------------------------------------------------------------------

    def _failed(self, i: int, err: GatewayError, lease: str) -> None:
        self.index.release(lease)  # the shared count had the request on the first replica tried
        state = self.states[i]
        state.cool_until = time.monotonic() + FAILURE_COOLDOWN
        self.balancer.prefixes.forget(i)
        what = "replica %s failed before the first byte (%s: %s); trying another"
        throttled.warning(f"failed:{state.label}", what, state.label, err.code, err.message)

    def _broke(self, i: int, err: GatewayError) -> None:
        """A replica's stream broke after its first byte: passed over for a while, so that a resumed
        stream (``gateway/routing/resume.py``), whose prompt leads back to it, goes elsewhere."""
        state = self.states[i]
        state.cool_until = time.monotonic() + FAILURE_COOLDOWN
        self.balancer.prefixes.forget(i)
        throttled.warning(
            f"broke:{state.label}", "replica %s broke off a stream (%s: %s)", state.label, err.code, err.message
        )

    def replay(self, request: InternalRequest) -> Callable[[list[bytes]], list[StreamEvent]]:
        """A reader of relayed chunks (every replica speaks the target's wire)."""
        replay = getattr(self.members[0], "replay", None)
        if replay is None:
            raise UpstreamFailed(f"target '{self.name}' cannot read back its relayed chunks")
        read: Callable[[list[bytes]], list[StreamEvent]] = replay(request)
        return read

    async def prompt_ids(self, request: InternalRequest, call: Call) -> list[int]:
        """A prompt's token ids from the first replica that tokenizes it (``_first_answer``)."""
        ids: list[int] = await self._first_answer("prompt_ids", "tokenizes", request, call)
        return ids

    async def count_tokens(self, request: InternalRequest, call: Call) -> int | None:
        """The prompt's size as a replica counts it (every replica serves one model: one tokenizer)."""
        count: int | None = await self._first_answer("count_tokens", "counts tokens", request, call)
        return count

    async def _first_answer(self, method: str, doing: str, request: InternalRequest, call: Call) -> Any:
        """A replica's answer to a question about the prompt: the healthy ones first, then those only
        a health scrape marked down (a busy engine's /health can be slow to answer, and without the
        ids a continuation is from text, not token for token); never one cooling off after a failure
        (it may be the one that just broke)."""
        err: GatewayError = UpstreamFailed(f"target '{self.name}': no replica {doing}")
        now = time.monotonic()
        pairs = sorted(zip(self.states, self.members, strict=True), key=lambda pair: not pair[0].healthy)
        for state, member in pairs:
            ask = getattr(member, method, None)
            if ask is None or state.cool_until > now:
                continue
            try:
                return await ask(request, call)
            except GatewayError as exc:
                err = exc
        raise err

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        lease = f"{self._lease_id}:{next(self._serial)}"
        try:
            return await self._complete(request, call, lease)
        finally:
            self.index.release(lease)

    async def _complete(self, request: InternalRequest, call: Call, lease: str) -> Completion:
        order, hashes = await self.router.order(request, call.session, time.monotonic(), lease)
        for attempt, i in enumerate(order):
            state = self.states[i]
            state.in_flight += 1
            try:
                completion = await self.members[i].complete(request, call)
            except GatewayError as err:
                if attempt == len(order) - 1 or not _retry_elsewhere(err, call):
                    raise
                self._failed(i, err, lease)
                continue
            finally:
                state.in_flight -= 1
            self.balancer.record(hashes, i)
            return completion
        raise AssertionError("unreachable")  # pragma: no cover

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        lease = f"{self._lease_id}:{next(self._serial)}"
        try:
            async with contextlib.aclosing(self._stream(request, call, lease)) as batches:
                async for batch in batches:
                    yield batch
        finally:
            self.index.release(lease)

    async def _stream(self, request: InternalRequest, call: Call, lease: str) -> AsyncGenerator[Batch, None]:
        order, hashes = await self.router.order(request, call.session, time.monotonic(), lease)
        for attempt, i in enumerate(order):
            state = self.states[i]
            state.in_flight += 1
            events = self.members[i].stream(request, call)
            try:
                try:
                    first = await anext(events)
                except (GatewayError, StopAsyncIteration) as exc:
                    err = exc if isinstance(exc, GatewayError) else UpstreamFailed(f"{state.label} closed the stream")
                    if attempt == len(order) - 1 or not _retry_elsewhere(err, call):
                        raise err from None
                    self._failed(i, err, lease)
                    continue
                self.balancer.record(hashes, i)
                yield first
                try:
                    async for batch in events:
                        yield batch
                except GatewayError as err:
                    self._broke(i, err)
                    raise
                return
            finally:
                state.in_flight -= 1
                await events.aclose()  # type: ignore[attr-defined]
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_models(self) -> list[str]:
        """What any replica serves; unreachable only when every replica is."""
        results = await asyncio.gather(*(m.list_models() for m in self.members), return_exceptions=True)
        served = [r for r in results if not isinstance(r, BaseException)]
        if not served:
            raise UpstreamFailed(f"target '{self.name}': no replica reachable; first: {results[0]}")
        return list(dict.fromkeys(name for names in served for name in names))
