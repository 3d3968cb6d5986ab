"""The gateway's one config file format (YAML), validated with pydantic: its sections, their rules,
and ``parse_config``, which turns a file's values into a ``GatewayConfig``.

    server:     {host, port, workers}; bounds on bodies, connections and answers held whole; the drain
                on SIGTERM; the variable holding the metrics token
    models:     public model name → targets (provider, base_url or replicas, upstream model, credential
                by environment variable or file, weight, timeouts, features to add, fields that may be
                dropped, a replica pool's balance); aliases, mid-stream resume, kind, its fair queue
    teams:      team id → API keys, stored as SHA-256 hashes; a key may instead be read from an
                environment variable at start-up and hashed at once (never kept in plain text); the
                models it may use; limits and budgets for the team and for each key; deadlines; its
                weight and class in a model's queue
    vendors:    for ``vendor/model`` names with no table entry: provider, base URL and key variable of
                each upstream vendor (the embedded default fills these from the environment)
    auth:       ``keys`` (the default) or ``none`` (open access)
    redis:      where limits, keys and shared state live across replicas; absent: in this process
    limits:     how limits are kept: the gateway replicas sharing them, the admission wait, leases,
                admitting a key's next request ahead
    spend:      prices and the budgets' currency, time zone and failure policy (``spend_config``)
    admin:      the admin key, by hash or by environment variable
    tracing:    OpenTelemetry over OTLP/HTTP; absent: no tracing
    reload:     reloading the config when its file changes, and how often files are checked
    responses:  how long stored Responses are kept, and how much of them per team
    priorities: the classes of a model's queue, highest first

``ConfigError`` names the file, the key path and the reason, in one line. Secrets are referenced
(``api_key_env``), never required inline. ``parse_config`` checks what the file alone shows (shapes,
values, names that must refer to a model); its refusals are worded by ``config_messages``. Reading
the file (size, encoding, YAML) is ``config_file``'s; what the file needs from the environment
(credential variables, someone able to present a key) is checked at start-up by
``config_environment``. Whether a provider exists is checked where the providers are known
(``gateway.web.app.check_target``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.runtime.config_messages import Placed, refusal
from gateway.runtime.spend_config import Budget, SpendSettings, price_problem


class ConfigError(Exception):
    pass


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return value.rstrip("/")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Model):
    connect: Annotated[float, Field(gt=0)] = 5.0
    first_byte: Annotated[float, Field(gt=0)] = 120.0
    idle: Annotated[float, Field(gt=0)] = 60.0
    total: Annotated[float, Field(gt=0)] = 600.0
    # a stream's first token (not its head) within this long, or the next target is tried before
    # anything reaches the client; None: only first_byte bounds the wait
    ttft: Annotated[float, Field(gt=0)] | None = None
    # An idle pooled upstream connection is dropped after this long: sooner than the upstream drops
    # it (uvicorn, so ``vllm serve``, after 5 s), or a request may be sent on a connection being closed.
    keepalive: Annotated[float, Field(gt=0)] = 4.0


class KvEvents(_Model):
    """vLLM's KV-cache events (``--kv-events-config``) as a pool's routing view (``backends/pool/kv_events.py``)."""

    endpoints: tuple[str, ...] = ()  # each replica's ZMQ publisher (tcp://host:port), in the replicas' order
    port: Annotated[int, Field(gt=0, lt=65536)] | None = None  # or: every replica's own host at this port
    # each replica's replay socket (``replay_endpoint``), in the replicas' order; or every replica's host at
    # this port; or neither: a gateway then learns only from the batches published after it connects
    replay_endpoints: tuple[str, ...] = ()
    replay_port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    tokenizer: str  # the model's directory: tokenizer.json, and its chat template for chat requests
    topic: str = ""  # the publisher's topic (``--kv-events-config``'s ``topic``)
    max_blocks: Annotated[int, Field(gt=0)] = 1 << 20  # blocks remembered per replica (oldest out first)
    # a prompt's characters tokenized to match (from the start): bounds the CPU a request costs (~1 µs/token)
    max_chars: Annotated[int, Field(gt=0)] = 16384
    hwm: Annotated[int, Field(gt=0)] = 10000  # event batches queued per replica; past it, the view restarts

    @model_validator(mode="after")
    def _one_source(self) -> KvEvents:
        if bool(self.endpoints) == (self.port is not None):
            raise ValueError("give exactly one of 'endpoints' or 'port'")
        if self.replay_endpoints and self.replay_port is not None:
            raise ValueError("give at most one of 'replay_endpoints' or 'replay_port'")
        if any(not e.startswith(("tcp://", "ipc://")) for e in (*self.endpoints, *self.replay_endpoints)):
            raise ValueError("endpoints must start with tcp:// or ipc://")
        return self


class Balance(_Model):
    """How a replica pool picks a replica (``backends/pool/replicas.py``)."""

    scrape_interval: Annotated[float, Field(gt=0)] = 1.0  # seconds between /health + /metrics scrapes
    # seconds a scrape may take before it counts as "too busy to answer" (default: 2 intervals, >= 1 s);
    # a busy engine's /metrics can take longer than that on a crowded host
    scrape_timeout: Annotated[float, Field(gt=0)] | None = None
    stale_after: Annotated[float, Field(gt=0)] = 5.0  # older engine metrics are ignored (in-flight only)
    prefix_block_chars: Annotated[int, Field(gt=0)] = 128  # prompt block size for prefix affinity
    prefix_capacity: Annotated[int, Field(gt=0)] = 65536  # remembered prompt blocks (LRU)
    affinity_slack: Annotated[float, Field(ge=0)] = 4.0  # load a sticky replica may carry above the least loaded
    session_header: str | None = "X-Session-Id"  # header naming a session; the request's user id otherwise
    # round-robin | least-loaded | prefix (this process's prefix index) | kv-shared (one index in Redis for
    # every gateway replica; prefix without Redis, or while Redis is slow)
    strategy: Literal["round-robin", "least-loaded", "prefix", "kv-shared"] = "prefix"
    shared_ttl: Annotated[float, Field(gt=0)] = 600.0  # seconds a block stays in the shared index unused
    shared_timeout_ms: Annotated[float, Field(gt=0)] = 20.0  # the shared index's answer, or the local one
    # seconds a request counts in the shared in-flight counts without its gateway renewing it: how long
    # a gateway that died still weighs on the replicas it used (kv-shared)
    shared_lease: Annotated[float, Field(gt=0)] = 15.0
    kv_events: KvEvents | None = None  # vLLM's KV-cache events first, when they are live (prefix, kv-shared)

    @model_validator(mode="after")
    def _events_need_affinity(self) -> Balance:
        if self.kv_events is not None and self.strategy in ("round-robin", "least-loaded"):
            raise ValueError(f"kv_events needs strategy prefix or kv-shared, not {self.strategy}")
        return self


class Target(_Model):
    provider: str
    base_url: str = ""  # one upstream; or ``replicas``; or ``engine`` (or nothing) for an in-process backend
    replicas: tuple[str, ...] = ()  # several replicas of one model server (a pool, load-balanced)
    balance: Balance = Balance()
    engine: dict[str, Any] | None = None  # in-process engine arguments (``vllm-engine``: AsyncEngineArgs)
    model: str | None = None  # upstream model name; defaults to the public name
    api_key_env: str | None = None
    # a file holding the key (a Kubernetes Secret mount): re-read when it changes, on reload, and once
    # when the upstream answers 401 (``gateway/runtime/secrets.py``)
    api_key_file: str | None = None
    team: str | None = None  # the vendor's team/account header (X-Friendli-Team, x-selected-account-id)
    weight: Annotated[float, Field(gt=0)] = 1.0
    timeouts: Timeouts = Timeouts()
    extra_features: tuple[str, ...] = ()  # e.g. the Friendli samplers of our vLLM plugins
    drop_unsupported: tuple[str, ...] = ()  # features that may be dropped (counted, logged)
    adapters: dict[str, str] = {}  # adapter / peft / deployment id → upstream model name
    name: str | None = None  # target id for logs and metrics; defaults to provider:model
    # a client's own body (an Anthropic client's to ``anthropic`` or ``vllm``, a Responses client's to
    # ``openai`` or ``vllm``) goes to the target's own path for it as it came; false: always translated
    passthrough: bool = True

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value) if value else value

    @field_validator("replicas")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        urls = tuple(_http_url(v) for v in value)
        if len(set(urls)) != len(urls):
            raise ValueError("a replica is listed twice")
        return urls

    @model_validator(mode="after")
    def _one_place(self) -> Target:
        # None at all is for in-process providers that take no arguments (``mock``); an HTTP provider
        # without an address is refused where the providers are known (``gateway.web.app.check_target``).
        places = {"base_url": bool(self.base_url), "replicas": bool(self.replicas), "engine": self.engine is not None}
        given = [k for k, set_ in places.items() if set_]
        if len(given) > 1:
            raise ValueError("give exactly one of 'base_url', 'replicas' or 'engine'")
        events = self.balance.kv_events
        if events is not None and not self.replicas:
            raise ValueError("balance.kv_events needs 'replicas'")
        for key in ("endpoints", "replay_endpoints"):
            listed = getattr(events, key, ())
            if listed and len(listed) != len(self.replicas):
                raise ValueError(f"balance.kv_events.{key}: give one per replica, in the same order")
        if self.api_key_env and self.api_key_file:
            raise ValueError("give at most one of 'api_key_env' or 'api_key_file'")
        return self


MAX_QUEUE_COUNT = 1_000_000  # a queue's capacity, share or max_waiting at most
# A class is named by the X-Gateway-Priority header, which is trimmed and read as one token.
PRIORITY_CLASS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Queue(_Model):
    """A model's slots and the queue in front of them (``gateway/limits/fairq.py``, docs/fair-queuing.md)."""

    # requests in flight to the model's targets, across every gateway; or ``auto``: learned from the
    # replicas' vLLM gauges (what each ran at once when it began to queue)
    # Bounded: the counts are Lua numbers in Redis (exact below 2**53) and a float in the metrics; an
    # unbounded timeout is a waiter that never hears back.
    capacity: Annotated[int, Field(gt=0, le=MAX_QUEUE_COUNT)] | Literal["auto"]
    max_waiting: Annotated[int, Field(ge=0, le=MAX_QUEUE_COUNT)] = (
        256  # waiting, every class and gateway; past it: shed
    )
    timeout: Annotated[float, Field(gt=0, le=3600)] = (
        30.0  # seconds a request may wait for a slot (its deadline if sooner)
    )
    # this gateway's slots while Redis is out; default: capacity / limits.replicas, rounded up
    share: Annotated[int, Field(gt=0, le=MAX_QUEUE_COUNT)] | None = None
    # free slots kept from a team whose requests alone wait, while another team or a higher class sent
    # one within ``reserve_window`` seconds (docs/fair-queuing.md); 0: every free slot goes at once
    reserve: Annotated[int, Field(ge=0, le=MAX_QUEUE_COUNT)] = 0
    reserve_window: Annotated[float, Field(gt=0, le=3600)] = 2.0

    @model_validator(mode="after")
    def _reserve_below_capacity(self) -> Queue:
        if isinstance(self.capacity, int) and self.reserve >= self.capacity:
            raise ValueError("reserve: must be below capacity (a slot kept free needs a release to come)")
        return self


class ModelEntry(_Model):
    name: str
    aliases: tuple[str, ...] = ()
    targets: Annotated[tuple[Target, ...], Field(min_length=1)]
    # a stream that breaks after its first byte continues on a target that can continue it (vLLM):
    # None = on when one of the targets can; the X-Gateway-Resume header decides per request
    resume: bool | None = None
    max_resumes: Annotated[int, Field(ge=0, le=16)] = 2  # continuations of one request at most
    # what the model serves: chat (and completions, responses) or embeddings; the other is a named 400
    kind: Literal["chat", "embedding"] = "chat"
    queue: Queue | None = None  # absent: no capacity, no queue, no extra work per request


class ResponsesStore(_Model):
    """Stored Responses (``store``, ``previous_response_id``): in Redis when configured, else in process."""

    ttl_seconds: Annotated[float, Field(gt=0)] = 30 * 24 * 3600.0  # as OpenAI keeps them: 30 days
    # what one team may keep, in bytes of stored JSON: past it, its oldest stored responses go first
    max_bytes_per_team: Annotated[int, Field(gt=0)] = 64 * 1024 * 1024


class KeyEntry(_Model):
    id: str
    sha256: str | None = None
    env: str | None = None
    priority: str | None = None  # the key's class in a model's queue (default: its team's)

    @model_validator(mode="after")
    def _one_source(self) -> KeyEntry:
        if (self.sha256 is None) == (self.env is None):
            raise ValueError("give exactly one of 'sha256' or 'env'")
        if self.sha256 is not None and (
            len(self.sha256) != 64 or not all(c in "0123456789abcdef" for c in self.sha256)
        ):
            raise ValueError("'sha256' must be 64 lowercase hex digits")
        return self


class Limits(_Model):
    rpm: Annotated[int, Field(gt=0)] | None = None  # requests per minute (GCRA)
    rpm_burst: Annotated[int, Field(gt=0)] | None = None  # default: rpm
    tpm: Annotated[int, Field(gt=0)] | None = None  # tokens per minute (reserve, then settle)
    concurrency: Annotated[int, Field(gt=0)] | None = None  # requests in flight (leases)


class Team(_Model):
    id: str
    keys: tuple[KeyEntry, ...] = ()
    models: tuple[str, ...] | None = None  # allowed public models; None = all
    limits: Limits = Limits()  # for the whole team, across replicas
    key_limits: Limits = Limits()  # for each key of the team
    deadline: Annotated[float, Field(gt=0)] | None = None  # default request deadline (s)
    ttft: Annotated[float, Field(gt=0)] | None = None  # ceiling on every target's first-token deadline (s)
    budget: Budget | None = None  # spend of the whole team, across replicas
    key_budget: Budget | None = None  # spend of each key of the team
    weight: Annotated[float, Field(gt=0)] = 1.0  # its share of a saturated model's slots within a class
    priority: str | None = None  # its keys' class in a model's queue (default: the first of ``priorities``)


FailureMode = Literal["open", "closed"]


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class RedisConfig(_Model):
    url: str = "redis://127.0.0.1:6379/0"
    cluster: bool = False
    timeout_ms: Annotated[int, Field(gt=0)] = 50
    retry_seconds: Annotated[float, Field(gt=0)] = 1.0  # breaker: how long a failure keeps Redis out
    # per limit kind, what happens while Redis is unreachable: "open" enforces limit / replicas in each
    # process; "closed" refuses with 503
    on_failure: dict[Literal["rpm", "tpm", "concurrency"], FailureMode] = {}

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        # the schemes redis-py's from_url takes; any other fails there, at start-up, as a traceback
        if not value.startswith(REDIS_SCHEMES):
            raise ValueError(f"must start with {', '.join(REDIS_SCHEMES[:-1])} or {REDIS_SCHEMES[-1]}")
        return value


class LimitSettings(_Model):
    replicas: Annotated[int, Field(ge=1)] = 1  # gateway replicas sharing the limits (for fail-open shares)
    admission_timeout: Annotated[float, Field(ge=0)] = 10.0
    max_waiters: Annotated[int, Field(ge=0)] = 1000
    lease_ttl: Annotated[float, Field(gt=0)] = 30.0
    # with Redis: admit a team key's next request ahead while its requests come back to back, keeping
    # Redis's round trip off their path (gateway.limits.advance)
    advance: bool = True


class Admin(_Model):
    key_sha256: str | None = None
    key_env: str | None = None


class Vendor(_Model):
    provider: str
    base_url: str
    api_key_env: str | None = None
    team: str | None = None


class TracingConfig(_Model):
    """OpenTelemetry traces over OTLP/HTTP (``gateway.obs.tracing``, the ``tracing`` extra)."""

    endpoint: str = "http://127.0.0.1:4318/v1/traces"  # the collector's OTLP/HTTP traces URL
    sampling_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0  # of traces begun here; a client's choice is kept
    service_name: Annotated[str, Field(min_length=1)] = "llm-gateway"

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


class Server(_Model):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    workers: Annotated[int, Field(ge=1)] = 1
    max_body_bytes: Annotated[int, Field(gt=0)] = 8 * 1024 * 1024
    # A request body not whole this long after its head gets 408: a client that stops sending (a
    # Content-Length never reached, a chunked body with no last chunk) must not hold its connection.
    body_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # A connection's next request head must arrive whole this long after the connection opened or its
    # previous answer ended, else the connection is closed (aiohttp's keep-alive timeout: a head sent
    # byte by byte does not extend it).
    idle_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    # Connections one client address may hold open; the next gets 429 and is closed (0: no cap).
    # Behind a proxy every client shares the proxy's address: raise it there.
    max_connections_per_client: Annotated[int, Field(ge=0)] = 1000
    # Connections one worker holds open at once; the next gets 503 and is closed (0: no cap). Unset: half
    # of what the descriptor limit leaves after a reserve (``web/listener.py``), since a stream holds a
    # client socket and an upstream one.
    max_connections: Annotated[int, Field(ge=0)] | None = None
    # What all the non-streamed upstream answers being read at once may hold in memory; an answer
    # that would pass it fails as its target's failure (502, or the next target).
    max_buffered_bytes: Annotated[int, Field(gt=0)] = 256 * 1024 * 1024
    # On SIGTERM: stop accepting, let requests in flight run this long, then end what is left with the
    # dialect's error (LLM_GATEWAY_DRAIN_SECONDS or --drain-seconds override it; the Helm chart's
    # terminationGracePeriodSeconds must exceed it).
    drain_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # While this variable holds a token, /metrics and /ready's per-model detail (team, model and target
    # names) answer only ``Authorization: Bearer <token>``; unset, they are open to whoever reaches them.
    metrics_token_env: Annotated[str, Field(min_length=1)] = "LLM_GATEWAY_METRICS_TOKEN"


class Reload(_Model):
    """Reloading the config without a restart (``gateway/web/reload.py``); SIGHUP and
    ``POST /admin/reload`` always work."""

    watch: bool = False  # reload when the config file changes
    # how often the config file (with ``watch``) and the targets' ``api_key_file``s are checked for change
    poll_seconds: Annotated[float, Field(gt=0, le=3600)] = 1.0


class GatewayConfig(_Model):
    server: Server = Server()
    models: tuple[ModelEntry, ...] = ()
    teams: tuple[Team, ...] = ()
    vendors: dict[str, Vendor] = {}
    auth: Literal["keys", "none"] = "keys"
    redis: RedisConfig | None = None  # absent: keys and limits live in this process
    limits: LimitSettings = LimitSettings()
    spend: SpendSettings = SpendSettings()  # prices and the budgets' currency, time zone and failure policy
    admin: Admin = Admin()
    tracing: TracingConfig | None = None  # absent: no tracing, nothing on the request path
    reload: Reload = Reload()
    responses: ResponsesStore = ResponsesStore()
    # the classes of a model's queue, highest first: a waiting request of one goes before any of the next
    priorities: Annotated[tuple[str, ...], Field(min_length=1)] = ("interactive", "batch")

    @model_validator(mode="after")
    def _unique(self) -> GatewayConfig:
        first: dict[str, int] = {}
        for i, m in enumerate(self.models):
            for name in (m.name, *m.aliases):
                if name in first:
                    where = "" if first[name] == i else f"; first at models[{first[name]}]"
                    raise Placed(("models", i), f"model name {name!r} is declared twice{where}")
                first[name] = i
        teams: dict[str, int] = {}
        for i, team in enumerate(self.teams):
            if team.id in teams:
                message = f"team id {team.id!r} is declared twice; first at teams[{teams[team.id]}]"
                raise Placed(("teams", i, "id"), message)
            teams[team.id] = i
        self._classes_known()
        return self

    def _classes_known(self) -> None:
        if len(set(self.priorities)) != len(self.priorities):
            raise Placed(("priorities",), "a class is listed twice")
        for i, name in enumerate(self.priorities):
            if not PRIORITY_CLASS.fullmatch(name):
                why = "letters, digits, '_', '.', '-' (up to 64), as the X-Gateway-Priority header names it"
                raise Placed(("priorities", i), f"a class is one token of {why}, not {name[:64]!r}")
        known = ", ".join(self.priorities)
        for i, team in enumerate(self.teams):
            if team.priority is not None and team.priority not in self.priorities:
                raise Placed(("teams", i, "priority"), f"unknown class {team.priority!r} (known: {known})")
            for j, key in enumerate(team.keys):
                if key.priority is not None and key.priority not in self.priorities:
                    where = ("teams", i, "keys", j, "priority")
                    raise Placed(where, f"unknown class {key.priority!r} (known: {known})")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _resolvable(name: str, models: set[str], vendors: Mapping[str, Vendor]) -> bool:
    """Whether the model table would resolve ``name`` without a catch-all (``gateway/routing/table.py``
    ``ModelTable.resolve``): a name or alias; ``vendor/model[/deployment]`` by its model; a vendor."""
    if name in models:
        return True
    parts = name.split("/")
    if len(parts) == 3 and ("/".join(parts[:2]) in models or parts[1] in models):
        return True
    return len(parts) >= 2 and (parts[1] in models or (parts[0] in vendors and bool(parts[1])))


def _check_names(config: GatewayConfig, source: str) -> None:
    models = {n for m in config.models for n in (m.name, *m.aliases)}
    for team in config.teams:
        for name in team.models or ():
            if not _resolvable(name, models, config.vendors):
                known = ", ".join([*(m.name for m in config.models), *(f"{p}/..." for p in sorted(config.vendors))])
                raise ConfigError(
                    f"{source}: teams[{team.id!r}].models: unknown model {name!r} (known: {known or 'none'})"
                )


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    if data is None:
        raise ConfigError(f"{source}: (top level): the file is empty: give at least 'models' (docs/configuration.md)")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r:.40})"
        raise ConfigError(f"{source}: (top level): must be a mapping of keys (models, teams, ...), not {kind}")
    try:
        config = GatewayConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {refusal(exc, data, GatewayConfig)}") from None
    _check_names(config, source)
    if problem := price_problem(config.spend.prices, *_price_names(config)):
        raise ConfigError(f"{source}: {problem}")
    return config


def _price_names(config: GatewayConfig) -> tuple[dict[str, set[str]], dict[str, str], set[str]]:
    """What a price may name: each model's target names, each alias's model, and the wildcards."""
    targets = {m.name: {t.name or f"{t.provider}:{t.model or m.name}" for t in m.targets} for m in config.models}
    aliases = {a: m.name for m in config.models for a in m.aliases}
    return targets, aliases, {f"{v}/*" for v in config.vendors} | {"local"}
