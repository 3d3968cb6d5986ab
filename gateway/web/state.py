"""The app-wide state every handler reads: built once at start-up by ``gateway.web.app``.

What a config decides (routes, teams, keys, limits, the admin key) is one immutable ``Generation``;
a reload (``gateway.web.reload``) swaps ``Gateway.gen`` for the next one in one assignment, and a
request reads ``gw.gen`` once, at its start, so it finishes on the generation it began with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.core.upstream import Upstream
from gateway.limits.admission import Admission, Policies
from gateway.limits.fairq_policy import FairQueues
from gateway.obs.load import Load
from gateway.obs.metrics import Tallies
from gateway.obs.routing import Routing
from gateway.obs.tracing import Tracer
from gateway.policy.access import ModelAccess
from gateway.policy.audit import AuditTrail
from gateway.policy.auth import KeyRing
from gateway.policy.keystore import Authenticator
from gateway.routing.table import ModelTable
from gateway.runtime.config import GatewayConfig, ResponsesStore, Server
from gateway.runtime.memory_budget import MemoryBudget
from gateway.runtime.secrets import Secrets
from gateway.web.record import Backlog, InFlight
from gateway.web.stored import Conversations, LocalStore


@dataclass(frozen=True, slots=True)
class Generation:
    """One config, compiled: never changed once built (the model table's health and probe results
    are per-target state, carried by the upstream objects a reload keeps)."""

    version: int  # 1 at start-up, one more per applied reload
    digest: str  # of the config's content (``gateway_config_info{hash}``)
    config: GatewayConfig
    keys: KeyRing
    auth: Authenticator
    models: ModelTable
    model_access: ModelAccess
    policies: Policies  # the teams' limits and deadlines
    admin_digest: str  # "" when the admin API is disabled
    upstreams: Mapping[str, Upstream]  # every target, by its config's identity (what a reload may keep)


@dataclass(slots=True)
class Gateway:
    gen: Generation
    access: logging.Logger
    admission: Admission
    redis: Any = None  # the Redis client, when configured
    secrets: Secrets = field(default_factory=Secrets)  # upstream keys, re-read on change
    budget: MemoryBudget = field(default_factory=lambda: MemoryBudget(Server().max_buffered_bytes))
    audit: AuditTrail = field(default_factory=AuditTrail)
    ready: dict[str, bool] = field(default_factory=dict)  # target name → last probe succeeded
    discovered: list[str] = field(default_factory=list)  # models the catch-all target reported
    backlog: Backlog = field(default_factory=Backlog)  # ended requests awaiting their log lines and metrics
    in_flight: InFlight = field(default_factory=InFlight)
    load: Load = field(default_factory=Load)  # per-model levels for autoscalers
    routing: Routing = field(default_factory=Routing)  # replica pools' decisions and KV-events feeds
    tracer: Tracer | None = None  # set when the config has a tracing section
    conversations: Conversations = field(default_factory=lambda: Conversations(LocalStore(ResponsesStore())))
    fair: FairQueues = field(default_factory=FairQueues)  # the models' queues (their ``queue`` config)
    draining: bool = False  # set on shutdown: /ready says 503, requests cut at the drain's end say why

    # The current generation's parts, for readers outside a request (probes, admin, status).
    @property
    def config(self) -> GatewayConfig:
        return self.gen.config

    @property
    def keys(self) -> KeyRing:
        return self.gen.keys

    @property
    def auth(self) -> Authenticator:
        return self.gen.auth

    @property
    def models(self) -> ModelTable:
        return self.gen.models

    @property
    def model_access(self) -> ModelAccess:
        return self.gen.model_access

    def tallies(self) -> tuple[Tallies, ...]:
        """This app's metric tallies, for its flushes (the process's own are flushed with them)."""
        return self.backlog.tallies, self.in_flight.tallies, self.load.tallies, self.routing.tallies


GATEWAY = web.AppKey("gateway", Gateway)
