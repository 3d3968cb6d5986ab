"""The gateway's one config file format (YAML), validated with pydantic.

    server:   {host, port, workers}
    models:   public model name → targets (provider, base_url, upstream model, credential by
              environment variable, weight, timeouts, features to add, fields that may be dropped)
    teams:    team id → API keys, stored as SHA-256 hashes; a key may instead be read from an
              environment variable at start-up and hashed at once (never kept in plain text)
    vendors:  for ``vendor/model`` names with no table entry: provider, base URL and key variable of
              each upstream vendor (the embedded default fills these from the environment)

``ConfigError`` names the file, the key path and the reason, in one line. Secrets are referenced
(``api_key_env``), never required inline.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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
    # An idle pooled upstream connection is dropped after this long: sooner than the upstream drops
    # it (uvicorn, so ``vllm serve``, after 5 s), or a request may be sent on a connection being closed.
    keepalive: Annotated[float, Field(gt=0)] = 4.0


class Balance(_Model):
    """How a replica pool picks a replica (``backends/replicas.py``)."""

    scrape_interval: Annotated[float, Field(gt=0)] = 1.0  # seconds between /health + /metrics scrapes
    # seconds a scrape may take before it counts as "too busy to answer" (default: 2 intervals, >= 1 s);
    # a busy engine's /metrics can take longer than that on a crowded host
    scrape_timeout: Annotated[float, Field(gt=0)] | None = None
    stale_after: Annotated[float, Field(gt=0)] = 5.0  # older engine metrics are ignored (in-flight only)
    prefix_block_chars: Annotated[int, Field(gt=0)] = 128  # prompt block size for prefix affinity
    prefix_capacity: Annotated[int, Field(gt=0)] = 65536  # remembered prompt blocks (LRU)
    affinity_slack: Annotated[float, Field(ge=0)] = 4.0  # load a sticky replica may carry above the least loaded
    session_header: str | None = "X-Session-Id"  # header naming a session; the request's user id otherwise


class Target(_Model):
    provider: str
    base_url: str = ""  # one upstream; or ``replicas``; or ``engine`` (or nothing) for an in-process backend
    replicas: tuple[str, ...] = ()  # several replicas of one model server (a pool, load-balanced)
    balance: Balance = Balance()
    engine: dict[str, Any] | None = None  # in-process engine arguments (``vllm-engine``: AsyncEngineArgs)
    model: str | None = None  # upstream model name; defaults to the public name
    api_key_env: str | None = None
    team: str | None = None  # the vendor's team/account header (X-Friendli-Team, x-selected-account-id)
    weight: Annotated[float, Field(gt=0)] = 1.0
    timeouts: Timeouts = Timeouts()
    extra_features: tuple[str, ...] = ()  # e.g. the Friendli samplers of our vLLM plugins
    drop_unsupported: tuple[str, ...] = ()  # features that may be dropped (counted, logged)
    adapters: dict[str, str] = {}  # adapter / peft / deployment id → upstream model name
    name: str | None = None  # target id for logs and metrics; defaults to provider:model

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
        return self


class ModelEntry(_Model):
    name: str
    aliases: tuple[str, ...] = ()
    targets: Annotated[tuple[Target, ...], Field(min_length=1)]


class KeyEntry(_Model):
    id: str
    sha256: str | None = None
    env: str | None = None

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


FailureMode = Literal["open", "closed"]


class RedisConfig(_Model):
    url: str = "redis://127.0.0.1:6379/0"
    cluster: bool = False
    timeout_ms: Annotated[int, Field(gt=0)] = 50
    retry_seconds: Annotated[float, Field(gt=0)] = 1.0  # breaker: how long a failure keeps Redis out
    # per limit kind, what happens while Redis is unreachable: "open" enforces limit / replicas in each
    # process; "closed" refuses with 503
    on_failure: dict[Literal["rpm", "tpm", "concurrency"], FailureMode] = {}


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


class Server(_Model):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    workers: Annotated[int, Field(ge=1)] = 1
    max_body_bytes: Annotated[int, Field(gt=0)] = 8 * 1024 * 1024
    # On SIGTERM: stop accepting, let requests in flight run this long, then end what is left with the
    # dialect's error (LLM_GATEWAY_DRAIN_SECONDS or --drain-seconds override it; the Helm chart's
    # terminationGracePeriodSeconds must exceed it).
    drain_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0


class GatewayConfig(_Model):
    server: Server = Server()
    models: tuple[ModelEntry, ...] = ()
    teams: tuple[Team, ...] = ()
    vendors: dict[str, Vendor] = {}
    auth: Literal["keys", "none"] = "keys"
    redis: RedisConfig | None = None  # absent: keys and limits live in this process
    limits: LimitSettings = LimitSettings()
    admin: Admin = Admin()

    @model_validator(mode="after")
    def _unique(self) -> GatewayConfig:
        seen: set[str] = set()
        for m in self.models:
            for name in (m.name, *m.aliases):
                if name in seen:
                    raise ValueError(f"model name {name!r} is declared twice")
                seen.add(name)
        teams = [t.id for t in self.teams]
        if len(teams) != len(set(teams)):
            raise ValueError("team ids must be unique")
        return self


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_hashes(team: Team, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(key id, sha256) for each key of a team; ``env`` keys are read and hashed here, once."""
    environ = os.environ if env is None else env
    out = []
    for key in team.keys:
        if key.sha256 is not None:
            out.append((key.id, key.sha256))
            continue
        assert key.env is not None
        secret = environ.get(key.env)
        if not secret:
            raise ConfigError(f"teams.{team.id}.keys.{key.id}: environment variable {key.env} is not set")
        out.append((key.id, hash_key(secret)))
    return out


def _path(loc: tuple[int | str, ...], data: Any) -> str:
    parts: list[str] = []
    node = data
    for p in loc:
        if isinstance(p, int) and isinstance(node, list) and p < len(node):
            node = node[p]
            label = node.get("name") or node.get("id") if isinstance(node, dict) else None
            parts.append(f"[{label!r}]" if label else f"[{p}]")
        else:
            node = node.get(p) if isinstance(node, dict) else None
            parts.append(f".{p}" if parts else str(p))
    return "".join(parts)


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data or {})
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = _path(tuple(err["loc"]), data) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        raise ConfigError(f"{source}: {where}: {msg}") from None


def load_config(path: str | Path) -> GatewayConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{p}: {where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_config(data, str(p))
