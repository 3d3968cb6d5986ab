"""Which limits apply to one request, as data: the input of one atomic admission and its settlement.

Keys are ``llmgw:{<team>}:...``: the braces are a Redis Cluster hash tag, so every key of one
admission lands in the team's slot. Per-key limits live under the team too (a key serving two teams
has separate budgets in each). Sans-IO: no Redis here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from random import getrandbits

from gateway.core.records import record
from gateway.core.request import InternalRequest, Operation

CHARS_PER_TOKEN = 4  # a deliberately generous estimate for reservation; settlement corrects it
DEFAULT_MAX_TOKENS_ESTIMATE = 512
USAGE_BUCKET_SECONDS = 3600
USAGE_TTL_SECONDS = 35 * 24 * 3600


@dataclass(frozen=True, slots=True)
class LimitValues:
    rpm: int | None = None
    rpm_burst: int | None = None  # default: rpm (a full minute's worth may arrive at once)
    tpm: int | None = None
    concurrency: int | None = None


@record
class Check:
    """One limit of a team or a key: built once per team key (``Layout``); what a request reserves
    under it (its token estimate, its lease) is on its ``Plan``."""

    key: str
    kind: str  # rpm | tpm | conc
    limit: int
    burst: str  # rpm: the requests that may arrive at once; "" for the other kinds
    scope: str  # "team" or "key": for refusal messages and metrics

    @property
    def label(self) -> str:
        return f"{self.scope}_{self.kind}"


@dataclass(frozen=True, slots=True)
class Layout:
    """The limits that apply to one team key, in check order, with their keys (the scripts' KEYS):
    the same for each of its requests, so built once (``Admission`` keeps them) rather than per request."""

    checks: tuple[Check, ...] = ()
    keys: tuple[str, ...] = ()
    concurrency_keys: tuple[str, ...] = ()
    tokens: bool = False  # a tokens-per-minute limit applies (a reserve fits by token estimate)


@dataclass(slots=True)
class Plan:
    team: str
    key_id: str
    layout: Layout
    estimate: int
    prompt_estimate: int
    lease: str
    usage_key: str
    settled: bool = False

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.layout.checks

    @property
    def concurrency_keys(self) -> tuple[str, ...]:
        return self.layout.concurrency_keys

    def param(self, check: Check) -> str:
        """What this request puts under ``check``: its burst (rpm), token estimate (tpm) or lease (conc)."""
        return check.burst if check.kind == "rpm" else str(self.estimate) if check.kind == "tpm" else self.lease


def new_lease() -> str:
    """A concurrency lease's id: random, so replicas never need to agree on one."""
    return f"{getrandbits(96):024x}"


def tag(team: str) -> str:
    return "llmgw:{" + team + "}"


def usage_key(team: str, now: float | None = None) -> str:
    bucket = int((now if now is not None else time.time()) // USAGE_BUCKET_SECONDS) * USAGE_BUCKET_SECONDS
    return f"{tag(team)}:usage:{bucket}"


def estimate_prompt(request: InternalRequest) -> int:
    """Prompt tokens, estimated from characters (token-id prompts are counted exactly)."""
    if request.operation is Operation.CHAT:
        chars = sum(len(m.content) if isinstance(m.content, str) else 256 for m in request.messages)
        return chars // CHARS_PER_TOKEN + 1
    return sum(len(p) // CHARS_PER_TOKEN + 1 if isinstance(p, str) else len(p) for p in request.prompts)


def estimate_tokens(request: InternalRequest, prompt: int) -> int:
    """The prompt's estimate plus the most the answer may use, for every choice."""
    most = request.sampling.max_tokens or DEFAULT_MAX_TOKENS_ESTIMATE
    return prompt + most * request.choice_count


def checks_for(prefix: str, scope: str, values: LimitValues) -> list[Check]:
    out: list[Check] = []
    if values.rpm:
        out.append(Check(f"{prefix}:rpm", "rpm", values.rpm, str(values.rpm_burst or values.rpm), scope))
    if values.tpm:
        out.append(Check(f"{prefix}:tpm", "tpm", values.tpm, "", scope))
    if values.concurrency:
        out.append(Check(f"{prefix}:conc", "conc", values.concurrency, "", scope))
    return out


def layout(team: str, key_id: str, team_limits: LimitValues, key_limits: LimitValues) -> Layout:
    base = tag(team)
    checks = checks_for(base, "team", team_limits)
    if key_limits.rpm or key_limits.tpm or key_limits.concurrency:  # few keys have their own limits
        checks += checks_for(f"{base}:key:{key_id}", "key", key_limits)
    return Layout(
        tuple(checks),
        tuple(c.key for c in checks),
        tuple(c.key for c in checks if c.kind == "conc"),
        any(c.kind == "tpm" for c in checks),
    )


_current_usage_keys: dict[str, tuple[int, str]] = {}  # team -> (bucket, its key): one f-string a bucket


def current_usage_key(team: str) -> str:
    """``usage_key(team)`` for now, built once per usage bucket instead of once per request."""
    bucket = int(time.time() // USAGE_BUCKET_SECONDS)
    known = _current_usage_keys.get(team)
    if known is None or known[0] != bucket:
        known = _current_usage_keys[team] = (bucket, usage_key(team, bucket * USAGE_BUCKET_SECONDS))
    return known[1]


NO_LIMITS = Layout()


def unlimited(team: str, key_id: str, request: InternalRequest) -> Plan:
    """The plan of a team with no limits: nothing to check or reserve, only the usage to count."""
    return Plan(team, key_id, NO_LIMITS, 0, estimate_prompt(request), "", current_usage_key(team))


def planned(team: str, key_id: str, limits: Layout, request: InternalRequest, lease: str) -> Plan:
    prompt = estimate_prompt(request)
    return Plan(team, key_id, limits, estimate_tokens(request, prompt), prompt, lease, current_usage_key(team))


def build(
    team: str, key_id: str, team_limits: LimitValues, key_limits: LimitValues, request: InternalRequest, lease: str
) -> Plan:
    """A one-off plan (its layout built for it)."""
    return planned(team, key_id, layout(team, key_id, team_limits, key_limits), request, lease)
