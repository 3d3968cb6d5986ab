"""``llm-gateway``: serve, check a config, hash a key.

    llm-gateway serve [--config FILE] [--host H] [--port P] [--workers N]
    llm-gateway check-config FILE
    llm-gateway hash-key            (reads a key on stdin, prints the sha256 the config wants)

``--workers N`` runs N processes on one port (SO_REUSEPORT); the kernel spreads connections. It is
refused when a target runs an engine in the process (``vllm-engine``): each worker would load the model.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
from typing import Any

from gateway.runtime.config import ConfigError, GatewayConfig, Target, hash_key, key_hashes, load_config

log = logging.getLogger("gateway")
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _tune_gc() -> None:
    """Start-up objects (modules, pydantic schemas, the app) move out of the collector's sight, and the
    young generation collects less often: each request allocates hundreds of short-lived objects, and
    with the default threshold (700) the in-flight requests' objects kept being promoted and scanned
    again in full collections that also walked every start-up object."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


def _worker(config: GatewayConfig, catch_all: Target | None, host: str, port: int) -> None:
    # Imported here, after the CLI has chosen the metrics mode: prometheus-client reads
    # PROMETHEUS_MULTIPROC_DIR when it is first imported.
    from aiohttp import web

    from gateway.obs import logs
    from gateway.web.app import create_app

    listener = logs.configure()
    _use_uvloop()
    try:
        app = create_app(config, catch_all)
        _tune_gc()
        web.run_app(
            app,
            host=host,
            port=port,
            reuse_port=True,
            handler_cancellation=True,
            access_log=None,
            print=None,
            shutdown_timeout=5.0,  # for idle connections: requests in flight are drained first (web.app)
        )
    finally:
        listener.stop()


def in_process_targets(config: GatewayConfig) -> list[str]:
    """Targets of in-process providers (``backends.ENGINES``) that load a model, as ``model/provider``."""
    from backends import ENGINES, PER_WORKER

    return [
        f"{m.name}/{t.provider}"
        for m in config.models
        for t in m.targets
        if t.provider in ENGINES and t.provider not in PER_WORKER
    ]


def serve(args: argparse.Namespace) -> int:
    from gateway.runtime.defaults import embedded

    catch_all: Target | None = None
    try:
        if args.config:
            config = load_config(args.config)
        else:
            config, catch_all = embedded()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = args.workers or config.server.workers
    drain = args.drain_seconds if args.drain_seconds is not None else os.environ.get("LLM_GATEWAY_DRAIN_SECONDS")
    if drain is not None:
        try:  # validated as the config file's own value would be
            server = type(config.server).model_validate({**config.server.model_dump(), "drain_seconds": drain})
        except ValueError:
            print(f"error: drain seconds must be a number from 0 to 3600, not {drain!r}", file=sys.stderr)
            return 2
        config = config.model_copy(update={"server": server})
    in_process = in_process_targets(config)
    if workers > 1 and in_process:
        # Each forked worker would start its own engine on the same devices, each loading the model.
        print(
            f"error: --workers {workers}: target(s) {', '.join(in_process)} run an engine in this process; "
            "serve them with one worker (scale out with more gateway replicas or with vllm serve replicas)",
            file=sys.stderr,
        )
        return 2
    if workers > 1 and config.redis is None:
        # Issued keys, revocations and limits would live in each worker apart: a key made in one would
        # be unknown to the others, and every limit would be multiplied by the worker count.
        print(
            f"error: --workers {workers} needs redis: without it keys and limits live in each worker apart; "
            "set redis.url in the config (or serve with one worker)",
            file=sys.stderr,
        )
        return 2
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Workers write their metrics to files here; /metrics in any worker aggregates them all.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="llm-gateway-metrics-")
    if catch_all is not None:
        from gateway.runtime.defaults import announcement

        # Plain text, not a JSON log line: the curl and SDK lines are for pasting as they stand.
        print("\n".join(announcement(config, catch_all, host, port)), file=sys.stderr, flush=True)
    from gateway.obs import logs

    listener = logs.configure()
    if catch_all is not None:
        vendors = ", ".join(sorted(config.vendors)) or "none (no vendor API key in the environment)"
        other = f"the local vLLM at {catch_all.base_url}"
        if len(config.vendors) == 1:
            other += f" for the models it lists, else {next(iter(config.vendors))}"
        log.info("no config given: embedded default; model 'demo': mock; vendors: %s; other names: %s", vendors, other)
        if config.auth == "none":
            log.warning("open access: set LLM_GATEWAY_API_KEY or use a config file with teams and keys")
    log.info("serving on http://%s:%d with %d worker(s)", host, port, workers)
    listener.stop()
    if workers == 1:
        _worker(config, catch_all, host, port)
        return 0
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(config, catch_all, host, port), daemon=False) for _ in range(workers)]
    for p in procs:
        p.start()

    def stop(signum: int, frame: Any) -> None:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGINT)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    from prometheus_client import multiprocess

    for p in procs:
        p.join()
        if p.pid is not None:
            multiprocess.mark_process_dead(p.pid)  # type: ignore[no-untyped-call]
    return max((p.exitcode or 0) for p in procs)


def check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
        for team in config.teams:
            key_hashes(team)
        from gateway.web.app import check_target

        for entry in config.models:
            for i, target in enumerate(entry.targets):
                try:
                    check_target(target)
                except ConfigError as exc:
                    raise ConfigError(f"{args.file}: models[{entry.name!r}].targets[{i}]: {exc}") from None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.file}: OK")
    print("routes:")
    for entry in config.models:
        names = ", ".join((entry.name, *entry.aliases))
        for t in entry.targets:
            where = t.base_url or " ".join(t.replicas) or "(in-process)"
            print(f"  {names} -> {t.provider} {where} model={t.model or entry.name} weight={t.weight:g}")
    for prefix, vendor in sorted(config.vendors.items()):
        print(f"  {prefix}/* -> {vendor.provider} {vendor.base_url}")
    print("keys:")
    for team in config.teams:
        for key in team.keys:
            source = f"env {key.env}" if key.env else f"sha256 {key.sha256[:12] if key.sha256 else ''}…"
            print(f"  team {team.id}: key {key.id} ({source})")
    if config.auth == "none":
        print("  auth: none (open access)")
    return 0


def hash_key_cmd(args: argparse.Namespace) -> int:
    secret = sys.stdin.readline().strip()
    if not secret:
        print("error: no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(secret))
    return 0


def admin_call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> int:
    """One admin API call (``gateway/web/admin.py``), its JSON answer printed."""
    import json

    import httpx

    key = args.admin_key or os.environ.get("LLM_GATEWAY_ADMIN_KEY")
    if not key:
        print("error: give --admin-key or set LLM_GATEWAY_ADMIN_KEY", file=sys.stderr)
        return 2
    try:
        resp = httpx.request(
            method, args.url.rstrip("/") + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
    except httpx.HTTPError as exc:
        print(f"error: {args.url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(resp.json(), indent=2))
    return 0 if resp.is_success else 1


def keys_cmd(args: argparse.Namespace) -> int:
    if args.action == "create":
        body: dict[str, Any] = {"teams": args.team, "name": args.name or ""}
        if args.expires_in:
            body["expires_in"] = args.expires_in
        return admin_call(args, "POST", "/admin/keys", body)
    if args.action == "revoke":
        return admin_call(args, "DELETE", f"/admin/keys/{args.id}")
    return admin_call(args, "GET", "/admin/keys")


def teams_cmd(args: argparse.Namespace) -> int:
    if args.action == "usage":
        return admin_call(args, "GET", f"/admin/teams/{args.team}/usage?hours={args.hours}")
    return admin_call(args, "GET", "/admin/teams")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-gateway", description="Multi-provider LLM gateway")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--config", help="config file (YAML); omitted: the embedded default")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--workers", type=int, help="processes sharing the port (default: config, else 1)")
    s.add_argument(
        "--drain-seconds",
        type=float,
        help="on SIGTERM, how long requests in flight may run on (default: LLM_GATEWAY_DRAIN_SECONDS, "
        "else config server.drain_seconds, else 30)",
    )
    s.set_defaults(func=serve)
    c = sub.add_parser("check-config", help="validate a config file and print what it would serve")
    c.add_argument("file")
    c.set_defaults(func=check_config)
    h = sub.add_parser("hash-key", help="print the sha256 of a key read from stdin")
    h.set_defaults(func=hash_key_cmd)
    admin = argparse.ArgumentParser(add_help=False)
    admin.add_argument("--url", default="http://127.0.0.1:8080", help="a running gateway")
    admin.add_argument("--admin-key", help="default: LLM_GATEWAY_ADMIN_KEY")
    k = sub.add_parser("keys", help="issue, list and revoke team API keys", parents=[admin])
    ks = k.add_subparsers(dest="action", required=True)
    create = ks.add_parser("create", parents=[admin])
    create.add_argument("--team", action="append", required=True, help="repeat for a key of several teams")
    create.add_argument("--name")
    create.add_argument("--expires-in", type=float, help="seconds")
    ks.add_parser("list", parents=[admin])
    revoke = ks.add_parser("revoke", parents=[admin])
    revoke.add_argument("id")
    k.set_defaults(func=keys_cmd)
    t = sub.add_parser("teams", help="teams and their usage", parents=[admin])
    ts = t.add_subparsers(dest="action", required=True)
    ts.add_parser("list", parents=[admin])
    use = ts.add_parser("usage", parents=[admin])
    use.add_argument("team")
    use.add_argument("--hours", type=int, default=24)
    t.set_defaults(func=teams_cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))
