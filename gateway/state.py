"""The app-wide state every handler reads: built once at start-up by ``gateway.app``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.auth import KeyRing
from gateway.config import GatewayConfig
from gateway.keystore import Authenticator
from gateway.limits.admission import Admission
from gateway.routing import ModelTable


@dataclass(slots=True)
class Gateway:
    config: GatewayConfig
    keys: KeyRing
    auth: Authenticator
    models: ModelTable
    team_models: dict[str, frozenset[str] | None]
    access: logging.Logger
    admission: Admission
    redis: Any = None  # the Redis client, when configured
    ready: dict[str, bool] = field(default_factory=dict)  # target name → last probe succeeded
    discovered: list[str] = field(default_factory=list)  # models the catch-all target reported


GATEWAY = web.AppKey("gateway", Gateway)
