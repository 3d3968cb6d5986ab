"""The app-wide state every handler reads: built once at start-up by ``gateway.web.app``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.limits.admission import Admission
from gateway.obs.load import Load
from gateway.obs.metrics import Tallies
from gateway.obs.tracing import Tracer
from gateway.policy.access import ModelAccess
from gateway.policy.auth import KeyRing
from gateway.policy.keystore import Authenticator
from gateway.routing.table import ModelTable
from gateway.runtime.config import GatewayConfig
from gateway.web.record import Backlog, InFlight


@dataclass(slots=True)
class Gateway:
    config: GatewayConfig
    keys: KeyRing
    auth: Authenticator
    models: ModelTable
    model_access: ModelAccess
    access: logging.Logger
    admission: Admission
    redis: Any = None  # the Redis client, when configured
    ready: dict[str, bool] = field(default_factory=dict)  # target name → last probe succeeded
    discovered: list[str] = field(default_factory=list)  # models the catch-all target reported
    backlog: Backlog = field(default_factory=Backlog)  # ended requests awaiting their log lines and metrics
    in_flight: InFlight = field(default_factory=InFlight)
    load: Load = field(default_factory=Load)  # per-model levels for autoscalers
    tracer: Tracer | None = None  # set when the config has a tracing section
    draining: bool = False  # set on shutdown: /ready says 503, requests cut at the drain's end say why

    def tallies(self) -> tuple[Tallies, ...]:
        """This app's metric tallies, for its flushes (the process's own are flushed with them)."""
        return self.backlog.tallies, self.in_flight.tallies, self.load.tallies


GATEWAY = web.AppKey("gateway", Gateway)
