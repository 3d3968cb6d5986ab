"""Reloading the config without a restart: on SIGHUP, on ``POST /admin/reload``, and (config
``reload.watch``) when the file changes.

The file is read and checked in full first, as ``llm-gateway check-config`` checks it (providers,
credential variables and key files included); a bad one is refused, the running config keeps
serving, and the reason is logged and answered. A good one is compiled into a new ``Generation``
(``gateway/web/state.py``) and swapped in with one assignment: a request reads the generation once,
at its start, and finishes on it (routes, teams, keys, limits, targets), while new requests get the
new one. Targets whose config did not change are carried over with their connection pools and
health; removed ones are closed once the requests in flight at the swap have ended. Limit counters
live in the limiter under the team's and key's names, so they carry over; a team whose limits
changed is held to its new limits from its current counts (a lowered limit gives no fresh budget).

``server``, ``redis``, ``limits`` and ``tracing`` (the listener, Redis client, admission settings, tracer)
change only on restart: a reload keeps their running values and says which differed.

Workers (``--workers N``): the parent process forwards SIGHUP to every worker. ``POST
/admin/reload`` reaches one worker; once its reload is applied, it sends SIGHUP to the parent, which
forwards it to all (the first worker's second reload finds nothing changed). A signal needs no Redis
and no subscription, and the parent already supervises the workers. A worker holds a SIGHUP that
comes before its loop takes the signal (``hold_sighup``) and reloads once it does, so a reload during
a worker's start is not lost; its ``gateway_config_info`` series shows only from then on. With
``reload.watch`` each worker watches the file itself.

The same loop polls the targets' ``api_key_file``s (one ``stat`` each per ``reload.poll_seconds``)
and re-reads those that changed (``gateway/runtime/secrets.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.core.upstream import Upstream
from gateway.limits.fairq_policy import fair_policy
from gateway.obs.metrics import CONFIG_RELOADS, set_config_info
from gateway.runtime.config import ConfigError, GatewayConfig
from gateway.runtime.config_file import load_config
from gateway.runtime.secrets import Stamp, file_stamp
from gateway.web import ops
from gateway.web.state import Gateway, Generation

log = logging.getLogger("gateway")
# Sections, or a section's fields, that only a restart changes: what they set up is made once (the
# listener, Redis clients, the tracer), or changing them mid-period would split a budget's sums
# (currency, time zone). Prices reload: a request is charged at its generation's table.
RESTART_ONLY = ("server", "redis", "limits", "tracing", "spend.currency", "spend.time_zone", "spend.on_failure")
Rebuild = Callable[[Gateway, GatewayConfig, str], Generation]


def config_digest(config: GatewayConfig) -> str:
    """A short digest of the config's content (not its file's bytes: comments and layout do not count)."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


@dataclass(slots=True)
class Outcome:
    result: str  # applied, unchanged or refused (``gateway_config_reloads_total{result}``)
    version: int
    hash: str
    reason: str | None = None  # why it was refused
    changes: dict[str, list[str]] = field(default_factory=dict)
    restart_needed: list[str] = field(default_factory=list)
    keys_reread: list[str] = field(default_factory=list)  # credential sources whose value changed

    def public(self) -> dict[str, Any]:
        """The admin answer and the log line's fields: the empty parts left out."""
        always = {"result": self.result, "version": self.version, "hash": self.hash}
        rest = {
            "reason": self.reason,
            "changes": self.changes,
            "restart_needed": self.restart_needed,
            "keys_reread": self.keys_reread,
        }
        return always | {k: v for k, v in rest.items() if v}


def _named(items: dict[str, Any], before: dict[str, Any]) -> dict[str, list[str]]:
    out = {
        "added": sorted(set(items) - set(before)),
        "removed": sorted(set(before) - set(items)),
        "changed": sorted(n for n in set(items) & set(before) if items[n] != before[n]),
    }
    return {k: v for k, v in out.items() if v}


def changes(old: GatewayConfig, new: GatewayConfig) -> dict[str, list[str]]:
    """What a reload changed, by name only (models, teams, static keys as ``team/key``, vendors)."""
    parts = {
        "models": _named({m.name: m for m in new.models}, {m.name: m for m in old.models}),
        "teams": _named({t.id: t for t in new.teams}, {t.id: t for t in old.teams}),
        "keys": _named(
            {f"{t.id}/{k.id}": k for t in new.teams for k in t.keys},
            {f"{t.id}/{k.id}": k for t in old.teams for k in t.keys},
        ),
        "vendors": _named(dict(new.vendors), dict(old.vendors)),
    }
    return {f"{what}_{how}": names for what, part in parts.items() for how, names in part.items()}


def keep_running(config: GatewayConfig, running: GatewayConfig) -> tuple[GatewayConfig, list[str]]:
    """``config`` with the running values of the sections only a restart changes, and their names."""
    differ = [path for path in RESTART_ONLY if _at(config, path) != _at(running, path)]
    for path in differ:
        config = _put(config, path.split("."), _at(running, path))
    return config, differ


def _at(model: Any, path: str) -> Any:
    for name in path.split("."):
        model = getattr(model, name)
    return model


def _put(model: Any, names: list[str], value: Any) -> Any:
    """``model`` with the field at ``names`` set to ``value`` (the models are frozen: copies)."""
    head, *rest = names
    return model.model_copy(update={head: _put(getattr(model, head), rest, value) if rest else value})


class Reloader:
    """The app's reloads, one at a time, and the tasks they leave (retiring targets, the watch)."""

    def __init__(self, gw: Gateway, path: str | None, siblings: Callable[[], None] | None, rebuild: Rebuild) -> None:
        self.gw = gw
        self.path = path
        self.siblings = siblings
        self.rebuild = rebuild
        self.lock = asyncio.Lock()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.retiring: dict[asyncio.Task[Any], list[Upstream]] = {}

    async def reload(self, who: str) -> Outcome:
        async with self.lock:
            outcome = await self._reload()
        CONFIG_RELOADS.labels(outcome.result).inc()
        fields = {"event": "config_reload", "by": who, **outcome.public()}
        if outcome.result == "refused":
            log.warning("config reload refused: %s", outcome.reason, extra={"fields": fields})
        else:
            log.info("config reload %s", outcome.result, extra={"fields": fields})
        if outcome.result != "unchanged":
            await self.gw.audit.record(
                who,
                "config.reload",
                result=outcome.result,
                version=outcome.version,
                hash=outcome.hash,
                reason=outcome.reason,
                restart_needed=outcome.restart_needed or None,
                **outcome.changes,
            )
        if outcome.result == "applied" and self.siblings is not None and who not in ("sighup", "watch"):
            self.siblings()  # the parent forwards SIGHUP to every worker (this one finds nothing new)
        return outcome

    async def _reload(self) -> Outcome:
        gw, old = self.gw, self.gw.gen
        refused = Outcome("refused", old.version, old.digest)
        if self.path is None:
            refused.reason = "no config file: the embedded default changes only on restart (serve --config FILE)"
            return refused
        if gw.draining:
            refused.reason = "the gateway is shutting down"
            return refused
        try:
            config = await asyncio.to_thread(load_config, self.path)
            config, restart = keep_running(config, old.config)
            if config_digest(config) == old.digest:
                reread = gw.secrets.refresh()
                if reread:
                    old.models.keys_changed()
                return Outcome("unchanged", old.version, old.digest, restart_needed=restart, keys_reread=reread)
            gen = self.rebuild(gw, config, self.path)
        except ConfigError as exc:
            refused.reason = str(exc)
            return refused
        except Exception as exc:  # a fault of ours: the running config serves on, the traceback is logged
            log.exception("building the reloaded config failed")
            refused.reason = f"internal error building the config ({type(exc).__name__})"
            return refused
        fresh = [u for k, u in gen.upstreams.items() if k not in old.upstreams]
        try:
            await asyncio.gather(*(u.start() for u in fresh))
        except Exception as exc:
            await asyncio.gather(*(u.close() for u in fresh), return_exceptions=True)
            refused.reason = f"a new target failed to start ({type(exc).__name__}: {exc})"
            return refused
        reread = gw.secrets.refresh()
        if reread:
            gen.models.keys_changed()
        gw.gen = gen  # the swap: requests from here on read the new generation
        gw.fair.configure(fair_policy(config))  # the models' queues keep their waiters and slots
        set_config_info(gen.version, gen.digest, (old.version, old.digest))
        removed = [u for k, u in old.upstreams.items() if k not in gen.upstreams]
        if removed:
            self._retire(removed)
        if fresh:  # /ready and the catch-all's model list learn of new targets now, not at the next round
            self._spawn(ops.probe(gw), "probe")
        return Outcome("applied", gen.version, gen.digest, None, changes(old.config, config), restart, reread)

    def _retire(self, upstreams: list[Upstream]) -> None:
        """Closes ``upstreams`` once every request in flight now (any may be using them) has ended."""
        in_flight = set(self.gw.in_flight.tasks)
        task = asyncio.get_running_loop().create_task(self._close_after(in_flight, upstreams), name="retire")
        self.retiring[task] = upstreams
        task.add_done_callback(lambda t: self.retiring.pop(t, None))

    @staticmethod
    async def _close_after(in_flight: set[asyncio.Task[Any]], upstreams: list[Upstream]) -> None:
        if in_flight:
            await asyncio.wait(in_flight)
        await asyncio.gather(*(u.close() for u in upstreams), return_exceptions=True)

    def trigger(self, who: str) -> None:
        """A reload in the app's own task set (from a signal handler, which cannot await)."""
        self._spawn(self.reload(who), "reload")

    def _spawn(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def watch(self) -> None:
        """Polls the key files, and the config file with ``reload.watch``."""
        seen: Stamp | None = file_stamp(self.path) if self.path else None
        while True:
            await asyncio.sleep(self.gw.config.reload.poll_seconds)
            try:
                reread = self.gw.secrets.refresh_stale()
                if reread:
                    released = self.gw.gen.models.keys_changed()
                    fields = {"event": "key_reread", "sources": reread, "released": released or None}
                    log.info("upstream key re-read", extra={"fields": fields})
                if self.path and self.gw.config.reload.watch:
                    now = file_stamp(self.path)
                    if now != seen and now is not None:
                        seen = now
                        await self.reload("watch")
            except Exception:  # the watch must outlive a bad round
                log.exception("reload watch round failed")

    async def close(self) -> None:
        for task in [*self.tasks, *self.retiring]:
            task.cancel()
        await asyncio.gather(*self.tasks, *self.retiring, return_exceptions=True)
        # cancelled before their requests ended (shutdown has drained those): closed here
        await asyncio.gather(*(u.close() for ups in self.retiring.values() for u in ups), return_exceptions=True)


RELOADER = web.AppKey("reloader", Reloader)
_held: list[int] = []  # SIGHUPs taken before the loop's handler (``hold_sighup``)


def hold_sighup() -> None:
    """Until ``running`` takes SIGHUP, one is kept for it: set in the ``--workers`` parent before it
    forks, so a worker holds a reload asked for while it starts."""
    _held.clear()
    signal.signal(signal.SIGHUP, lambda signum, frame: _held.append(signum))


def install(app: web.Application, reloader: Reloader) -> None:
    app[RELOADER] = reloader


@contextlib.asynccontextmanager
async def running(app: web.Application) -> AsyncIterator[None]:
    """The watch task and, for a gateway serving a config file, the SIGHUP handler, for the app's life."""
    reloader = app[RELOADER]
    loop = asyncio.get_running_loop()
    watch = loop.create_task(reloader.watch(), name="reload-watch")
    hup = False
    if reloader.path is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(signal.SIGHUP, reloader.trigger, "sighup")
            hup = True
            if _held:  # asked for before the handler was in place: the reload it asked for
                _held.clear()
                reloader.trigger("sighup")
    try:
        yield
    finally:
        if hup:
            loop.remove_signal_handler(signal.SIGHUP)
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await reloader.close()
