"""``llm-gateway``: serve, check a config, hash a key, manage keys and teams on a running gateway.

    llm-gateway serve [--config FILE] [--host H] [--port P] [--workers N] [--log-format text|json]
    llm-gateway check-config FILE
    llm-gateway hash-key            (reads a key on stdin, prints the sha256 the config wants)
    llm-gateway keys create|list|revoke, teams list|usage   (tables; ``--json`` for scripts)

``--workers N`` runs N processes on one port (SO_REUSEPORT); the kernel spreads connections. It is
refused when a target runs an engine in the process (``vllm-engine``): each worker would load the model.

``serve --config`` and ``check-config`` run the same checks before anything listens, and refuse a
broken config in one line on stderr naming the file and key path (exit 2); a port already taken is
one line too (exit 1). Errors go to stderr, output to stdout. ``serve`` logs one summary line at
start-up (``start_summary``); its workers one at shutdown (``web.app``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from gateway.cli_admin import keys_cmd, spend_cmd, teams_cmd
from gateway.obs.logs import FORMATS, LEVELS
from gateway.runtime.config import ConfigError, GatewayConfig, Target, hash_key
from gateway.runtime.config_environment import check_environment
from gateway.runtime.config_file import load_config
from gateway.runtime.resolved import report

log = logging.getLogger("gateway")


class LogSettings(NamedTuple):
    """``logs.configure``'s arguments, as ``serve`` resolved them for itself and its workers."""

    level: str
    stream: TextIO | None
    fmt: str | None


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


def _worker(
    config: GatewayConfig,
    catch_all: Target | None,
    host: str,
    port: int,
    log_to: LogSettings,
    config_path: str | None = None,
    parent: int | None = None,
) -> None:
    """``parent``: the pid of the ``--workers`` parent, which forwards SIGHUP (a reload) to every worker."""
    # Imported here, after the CLI has chosen the metrics mode: prometheus-client reads
    # PROMETHEUS_MULTIPROC_DIR when it is first imported.
    from gateway.obs import logs
    from gateway.web.app import create_app
    from gateway.web.listener import serve

    listener = logs.configure(*log_to)
    _use_uvloop()
    try:
        try:
            app = create_app(config, catch_all, config_path, _signaller(parent))
        except ConfigError as exc:  # e.g. an in-process engine's optional extra is not installed
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        _tune_gc()
        server = config.server
        serving = serve(
            app,
            host,
            port,
            per_client=server.max_connections_per_client,
            total=server.max_connections,
            idle_timeout=server.idle_timeout_seconds,
        )
        asyncio.run(serving)
    finally:
        listener.stop()


def _signaller(parent: int | None) -> Callable[[], None] | None:
    """How a worker has every worker reload: SIGHUP to the parent, which forwards it (``serve``)."""
    if parent is None:
        return None

    def tell() -> None:
        if os.getppid() == parent:  # not a process that took the parent's place
            os.kill(parent, signal.SIGHUP)

    return tell


def in_process_targets(config: GatewayConfig) -> list[str]:
    """Targets of in-process providers (``backends.ENGINES``) that load a model, as ``model/provider``."""
    from backends import ENGINES, PER_WORKER

    return [
        f"{m.name}/{t.provider}"
        for m in config.models
        for t in m.targets
        if t.provider in ENGINES and t.provider not in PER_WORKER
    ]


# What the ``tracing`` section needs (the ``tracing`` extra), imported by ``gateway.obs.tracing``.
TRACING_MODULES: tuple[str, ...] = (
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
# What a pool's ``balance.kv_events`` needs (the ``kv-events`` extra), imported by ``backends.pool.kv_router``.
KV_EVENTS_MODULES: tuple[str, ...] = ("zmq", "msgspec", "tokenizers", "jinja2")


def check_extras(config: GatewayConfig, source: str) -> None:
    """The optional packages the config asks for are installed: ``check-config`` says so in one
    line, as ``serve`` would when it builds the app."""
    needs = [("tracing", "tracing", TRACING_MODULES)] if config.tracing is not None else []
    events = [
        (f"models[{m.name!r}].targets[{i}].balance.kv_events", t.balance.kv_events)
        for m in config.models
        for i, t in enumerate(m.targets)
        if t.balance.kv_events is not None
    ]
    needs += [(where, "kv-events", KV_EVENTS_MODULES) for where, _ in events]
    for where, extra, modules in needs:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                missing = f"pip install 'llm-gateway[{extra}]' ({name} is missing)"
                raise ConfigError(f"{source}: {where}: needs the optional extra: {missing}") from None
    if events:
        from backends.pool.kv_router import check as check_events

        for where, settings in events:
            problem = check_events(settings) if settings is not None else None
            if problem is not None:
                raise ConfigError(f"{source}: {where}.{problem}")


def check(config: GatewayConfig, source: str) -> None:
    """What ``serve`` and ``check-config`` check of a config file before anything listens: each target's
    provider and its way of running (the registries know: ``web.app.check_targets``, imported here, not
    at the top, since the registries import prometheus-client, which must come after the metrics mode
    is chosen in ``_worker``), the environment it names, and the optional packages it needs."""
    from gateway.web.app import check_targets

    check_targets(config, source)
    check_environment(config, source)
    check_extras(config, source)


def port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None. The probe binds without SO_REUSEPORT, so that a
    gateway already serving there (its workers share the port through it) counts as taken too; port 0
    is any free port."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"unknown host {host!r} ({exc.strerror})"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # as asyncio binds: a listener closed a moment ago (TIME_WAIT) is no obstacle, IPv6 alone
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return (exc.strerror or str(exc)).lower()
    return None


def log_settings(args: argparse.Namespace) -> LogSettings:
    """``--log-level``/``--log-format``, else their environment variables, else INFO and the format
    that suits stderr (``logs.default_format``); a wrong value is a ``ConfigError`` naming its source."""
    level = args.log_level or os.environ.get("LLM_GATEWAY_LOG_LEVEL") or "INFO"
    fmt = args.log_format or os.environ.get("LLM_GATEWAY_LOG_FORMAT") or None
    if level.upper() not in LEVELS:
        source = "--log-level" if args.log_level else "LLM_GATEWAY_LOG_LEVEL"
        raise ConfigError(f"error: {source} {level!r}: not one of {', '.join(LEVELS)}")
    if fmt is not None and fmt.lower() not in FORMATS:
        source = "--log-format" if args.log_format else "LLM_GATEWAY_LOG_FORMAT"
        raise ConfigError(f"error: {source} {fmt!r}: not one of {', '.join(FORMATS)}")
    return LogSettings(level.upper(), None, fmt.lower() if fmt else None)


def start_summary(config: GatewayConfig, catch_all: Target | None, host: str, port: int, workers: int) -> None:
    """The one start-up line: what is served, to whom, where, and how it stops."""
    models = [name for entry in config.models for name in (entry.name, *entry.aliases)]
    prefixes = [f"{prefix}/*" for prefix in sorted(config.vendors)] + (["*"] if catch_all is not None else [])
    redis = "none" if config.redis is None else ("cluster" if config.redis.cluster else "single")
    where = f"http://{f'[{host}]' if ':' in host else host}:{port}"  # port 0: any free one
    fields = {
        "event": "start",
        "listen": where,
        "models": models[:20],  # a config of thousands of models would make the line unreadable
        "model_count": len(config.models),
        "routes": prefixes,
        "teams": len(config.teams),
        "redis": redis,
        "workers": workers,
        "drain_seconds": config.server.drain_seconds,
    }
    log.info("serving", extra={"fields": fields})  # the fields say it all, in either log format


class Refused(Exception):
    """``serve`` will not start: the one line for stderr and the exit code (2: the config or the
    command line; 1: the machine, e.g. a port taken)."""

    def __init__(self, line: str, code: int = 2) -> None:
        super().__init__(line)
        self.code = code


class Plan(NamedTuple):
    """What ``serve`` will run, from its arguments, the environment and the config."""

    config: GatewayConfig
    catch_all: Target | None  # the embedded default's vLLM catch-all (no --config)
    host: str
    port: int
    workers: int
    log_to: LogSettings


def serve(args: argparse.Namespace) -> int:
    """Plan, refuse what cannot run, announce, then run: one worker in this process, or several."""
    try:
        plan = _plan(args)
        _refuse_unservable(plan, args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)  # "FILE: key.path: reason", one line
        return 2
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    _announce(plan)
    if plan.workers == 1:
        _worker(plan.config, plan.catch_all, plan.host, plan.port, plan.log_to, args.config)
        return 0
    return _run_workers(plan, args.config)


def _plan(args: argparse.Namespace) -> Plan:
    from gateway.runtime.defaults import embedded

    log_to = log_settings(args)
    catch_all: Target | None = None
    if args.config:
        config = load_config(args.config)
    else:
        config, catch_all = embedded()
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    config = _with_drain(config, args.drain_seconds)
    return Plan(config, catch_all, host, port, args.workers or config.server.workers, log_to)


def _with_drain(config: GatewayConfig, flag: float | None) -> GatewayConfig:
    """The drain time from ``--drain-seconds`` or the environment, validated as the config's own."""
    drain = flag if flag is not None else os.environ.get("LLM_GATEWAY_DRAIN_SECONDS")
    if drain is None:
        return config
    try:
        server = type(config.server).model_validate({**config.server.model_dump(), "drain_seconds": drain})
    except ValueError:
        raise Refused(f"error: drain seconds must be a number from 0 to 3600, not {drain!r}") from None
    return config.model_copy(update={"server": server})


def _refuse_unservable(plan: Plan, args: argparse.Namespace) -> None:
    config, workers = plan.config, plan.workers
    if plan.catch_all is not None:
        from gateway.runtime.defaults import open_refusal

        refusal = open_refusal(config, plan.host, args.allow_open)
        if refusal is not None:
            raise Refused(refusal)
    in_process = in_process_targets(config)
    if workers > 1 and in_process:
        # Each forked worker would start its own engine on the same devices, each loading the model.
        raise Refused(
            f"error: --workers {workers}: target(s) {', '.join(in_process)} run an engine in this process; "
            "serve them with one worker (scale out with more gateway replicas or with vllm serve replicas)"
        )
    if workers > 1 and config.redis is None:
        # Issued keys, revocations and limits would live in each worker apart: a key made in one would
        # be unknown to the others, and every limit would be multiplied by the worker count.
        raise Refused(
            f"error: --workers {workers} needs redis: without it keys and limits live in each worker apart; "
            "set redis.url in the config (or serve with one worker)"
        )
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Workers write their metrics to files here; /metrics in any worker aggregates them all.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="llm-gateway-metrics-")
    if args.config:  # the embedded default is built from the environment, so it always passes these
        check(config, args.config)
    taken = port_taken(plan.host, plan.port)
    if taken is not None:
        raise Refused(f"error: cannot listen on {plan.host}:{plan.port}: {taken} (choose another --port)", 1)


def _announce(plan: Plan) -> None:
    """The embedded default's paste-ready lines, then the start-up log line."""
    config, catch_all = plan.config, plan.catch_all
    if catch_all is not None:
        from gateway.runtime.defaults import announcement

        # Plain text, not a JSON log line: the curl and SDK lines are for pasting as they stand.
        print("\n".join(announcement(config, catch_all, plan.host, plan.port)), file=sys.stderr, flush=True)
    from gateway.obs import logs

    listener = logs.configure(*plan.log_to)
    if catch_all is not None:
        vendors = ", ".join(sorted(config.vendors)) or "none (no vendor API key in the environment)"
        other = f"the local vLLM at {catch_all.base_url}"
        if len(config.vendors) == 1:
            other += f" for the models it lists, else {next(iter(config.vendors))}"
        log.info("no config given: embedded default; model 'demo': mock; vendors: %s; other names: %s", vendors, other)
        if config.auth == "none":
            log.warning("open access: set LLM_GATEWAY_API_KEY or use a config file with teams and keys")
    start_summary(config, catch_all, plan.host, plan.port, plan.workers)
    listener.stop()


def _run_workers(plan: Plan, source: str | None) -> int:
    """Forks the workers, forwards SIGHUP (reload) and SIGTERM/SIGINT (drain) to them, and waits."""
    ctx = multiprocessing.get_context("fork")
    worker_args = (plan.config, plan.catch_all, plan.host, plan.port, plan.log_to, source, os.getpid())
    procs = [ctx.Process(target=_worker, args=worker_args, daemon=False) for _ in range(plan.workers)]
    from gateway.web.reload import hold_sighup

    # Held (inherited by the workers) until each worker's loop takes it: a reload asked for while a
    # worker starts is applied once it serves. Here, once the workers run, it is forwarded.
    hold_sighup()
    for p in procs:
        p.start()

    def send(sig: signal.Signals) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            for p in procs:
                if p.is_alive() and p.pid is not None:
                    os.kill(p.pid, sig)

        return handler

    signal.signal(signal.SIGHUP, send(signal.SIGHUP))
    signal.signal(signal.SIGTERM, send(signal.SIGINT))
    signal.signal(signal.SIGINT, send(signal.SIGINT))
    from prometheus_client import multiprocess

    for p in procs:
        p.join()
        if p.pid is not None:
            multiprocess.mark_process_dead(p.pid)  # type: ignore[no-untyped-call]
    return max((p.exitcode or 0) for p in procs)


def check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
        check(config, args.file)
    except ConfigError as exc:
        print(exc, file=sys.stderr)  # "FILE: key.path: reason", one line
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
    print("\n".join(report(config)))
    return 0


def schemas(rules: bool = True) -> dict[str, Any]:
    """The config file's JSON Schema, with the providers this gateway has."""
    from adapters import PROVIDERS
    from backends import ENGINES
    from gateway.runtime.schema import config_schema

    return config_schema(PROVIDERS, ENGINES, rules)


def registry() -> str:
    """The Helm chart's ``templates/_gateway.tpl``: the providers, and the features each takes."""
    from adapters import PROVIDERS
    from backends import ENGINE_EXTRAS
    from gateway.runtime.schema import chart_registry

    return chart_registry({p: wire.extras for p, wire in PROVIDERS.items()}, ENGINE_EXTRAS)


def config_schema_cmd(args: argparse.Namespace) -> int:
    import json

    from gateway.runtime.schema import chart_schema, dumps

    if args.chart is None:
        print(dumps(schemas()), end="")
        return 0
    path = Path(args.chart)
    path.write_text(dumps(chart_schema(json.loads(path.read_text()))))
    (path.parent / "templates" / "_gateway.tpl").write_text(registry())
    print(f"{path}, templates/_gateway.tpl: config checked as the gateway checks it")
    return 0


def hash_key_cmd(args: argparse.Namespace) -> int:
    secret = sys.stdin.readline().strip()
    if not secret:
        print("error: no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(secret))
    return 0


def parser() -> argparse.ArgumentParser:
    """Every option says what it does and its default (``test_cli`` checks each one)."""
    p = argparse.ArgumentParser(prog="llm-gateway", description="Multi-provider LLM gateway")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_serve_parser, _config_parsers, _admin_parsers):
        add(sub.add_parser)
    return p


AddParser = Callable[..., argparse.ArgumentParser]  # a subparsers' add_parser


def _serve_parser(add_parser: AddParser) -> None:
    s = add_parser("serve", help="run the gateway", description="Run the gateway.")
    s.add_argument("--config", help="config file (YAML) (default: the embedded default, docs/configuration.md)")
    s.add_argument("--host", help="address to listen on (default: config server.host, else 127.0.0.1)")
    s.add_argument(
        "--port", type=int, help="port to listen on; 0 for any free one (default: config server.port, else 8080)"
    )
    s.add_argument("--workers", type=int, help="processes sharing the port (default: config server.workers, else 1)")
    s.add_argument(
        "--allow-open",
        action="store_true",
        help="let the embedded default (no --config) serve without a key on an address beyond loopback "
        "(default: refused unless LLM_GATEWAY_API_KEY is set)",
    )
    s.add_argument(
        "--drain-seconds",
        type=float,
        help="on SIGTERM, how long requests in flight may run on (default: LLM_GATEWAY_DRAIN_SECONDS, "
        "else config server.drain_seconds, else 30)",
    )
    s.add_argument(
        "--log-format",
        choices=FORMATS,
        help="log lines as text (for a person) or JSON lines (for a collector) (default: "
        "LLM_GATEWAY_LOG_FORMAT, else text when stderr is a terminal and json when it is not)",
    )
    s.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        help="the least severe level logged (default: LLM_GATEWAY_LOG_LEVEL, else INFO)",
    )
    s.set_defaults(func=serve)


def _config_parsers(add_parser: AddParser) -> None:
    c = add_parser(
        "check-config",
        help="validate a config file and print what it would serve",
        description="Validate a config file, its providers and the environment it needs, as serve does at "
        "start-up; print the routes and keys it would serve, or the first mistake in one line (exit 2).",
    )
    c.add_argument("file", help="the config file (YAML)")
    c.set_defaults(func=check_config)
    cs = add_parser(
        "config-schema",
        help="print the config file's JSON Schema",
        description="Print the config file's JSON Schema (for editors); with --chart, write what the chart owns "
        "in its `config` value into a Helm chart's values.schema.json, and the config's shapes and the providers "
        "its templates check into templates/_gateway.tpl beside it.",
    )
    cs.add_argument("--chart", help="a values.schema.json to update in place (default: print the schema)")
    cs.set_defaults(func=config_schema_cmd)
    h = add_parser("hash-key", help="print the sha256 of a key read from stdin")
    h.set_defaults(func=hash_key_cmd)


def _admin_parsers(add_parser: AddParser) -> None:
    """The commands that talk to a running gateway, each with the admin options."""
    admin = argparse.ArgumentParser(add_help=False)
    admin.add_argument(
        "--url",
        help="a running gateway (default: LLM_GATEWAY_URL, else --config's server.host and server.port, "
        "else http://127.0.0.1:8080)",
    )
    admin.add_argument("--config", help="the gateway's config file, for its address (default: none)")
    admin.add_argument("--admin-key", help="the admin key (default: LLM_GATEWAY_ADMIN_KEY)")
    admin.add_argument(
        "--json", action="store_true", help="print the gateway's JSON answer, for scripts (default: a table)"
    )
    k = add_parser("keys", help="issue, list and revoke team API keys", parents=[admin])
    ks = k.add_subparsers(dest="action", required=True)
    create = ks.add_parser("create", parents=[admin], help="issue a key (printed once)")
    create.add_argument("--team", action="append", required=True, help="its team (required); repeat for several")
    create.add_argument("--name", help="a label for listings (default: none)")
    create.add_argument("--expires-in", type=float, help="seconds until it expires (default: never)")
    ks.add_parser("list", parents=[admin], help="list issued keys")
    revoke = ks.add_parser("revoke", parents=[admin], help="revoke an issued key")
    revoke.add_argument("id", help="the key id (from keys list)")
    k.set_defaults(func=keys_cmd)
    t = add_parser("teams", help="teams and their usage", parents=[admin])
    ts = t.add_subparsers(dest="action", required=True)
    ts.add_parser("list", parents=[admin], help="list teams, their limits and models")
    use = ts.add_parser("usage", parents=[admin], help="a team's usage, hour by hour")
    use.add_argument("team", help="the team id")
    use.add_argument("--hours", type=int, default=24, help="how many hours back (default: %(default)s)")
    t.set_defaults(func=teams_cmd)
    sp = add_parser("spend", help="settled spend per team, key, model or target", parents=[admin])
    sp.add_argument(
        "--group-by", choices=("team", "key", "model", "target"), default="team", help="rows (default: %(default)s)"
    )
    sp.add_argument(
        "--period", choices=("day", "week", "month"), default="month", help="the current one (default: %(default)s)"
    )
    sp.add_argument("--team", help="one team only (default: every team)")
    sp.set_defaults(func=spend_cmd)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code = 1
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, not at exit, so that a reader gone away is caught below
    except BrokenPipeError:
        # The reader left (``| head -1``): what it did not read had nowhere to go. stdout goes to
        # /dev/null so that the interpreter's own flush at exit does not print a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code
