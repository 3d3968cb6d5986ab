"""Which limits apply to one request, as data: the input of one atomic admission and its settlement.

Keys are ``llmgw:{<team>}:...``: the braces are a Redis Cluster hash tag, so every key of one
admission lands in the team's slot. Per-key limits live under the team too (a key serving two teams
has separate budgets in each). Sans-IO: no Redis here.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from random import getrandbits

from gateway.core.prompt import bound as prompt_bound
from gateway.core.records import record
from gateway.core.request import Feature, InternalRequest, Operation, Sampling
from gateway.limits.budget_rules import Rule, Window
from gateway.limits.prices import Rate

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
    rule: Rule | None = None  # a budget's (kind ``bud``)

    @property
    def label(self) -> str:
        return f"{self.scope}_{'budget' if self.kind == 'bud' else self.kind}"


@dataclass(frozen=True, slots=True)
class Layout:
    """The limits that apply to one team key, in check order, with their keys (the scripts' KEYS):
    the same for each of its requests, so built once (``Admission`` keeps them) rather than per request."""

    checks: tuple[Check, ...] = ()
    keys: tuple[str, ...] = ()
    concurrency_keys: tuple[str, ...] = ()
    tokens: bool = False  # a tokens-per-minute limit applies (a reserve fits by token estimate)
    budgets: bool = False  # a budget applies: its worst case reserved per request (a reserve's: per unit)
    hard: bool = False  # a hard budget applies: the answer's length is held to what its worst case counts


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
    cost_estimate: int = 0  # the worst case in millionths of the currency, reserved under money budgets
    windows: tuple[Window | None, ...] = ()  # per check, a budget's current window
    over: Check | None = None  # a soft budget this request went past
    spent: tuple[int, ...] = ()  # per check, a budget's spend with this request's worst case (admission's answer)

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.layout.checks

    @property
    def concurrency_keys(self) -> tuple[str, ...]:
        return self.layout.concurrency_keys

    def param(self, check: Check) -> str:
        """What this request puts under ``check``: its burst (rpm), token estimate (tpm) or lease (conc)."""
        return check.burst if check.kind == "rpm" else str(self.estimate) if check.kind == "tpm" else self.lease

    def budget(self, i: int, check: Check, held: object = None) -> list[object]:
        """Budget check ``i``'s element of the scripts' argument: kind, limit, this request's worst
        case, the window's fields, the field it adds to, soft (1/0), the oldest start kept, the TTL,
        whether it counts money (1) or tokens (0), and the reservation it holds (``held``: a
        settlement's list of the reservations it takes back instead)."""
        rule, win = check.rule, self.windows[i]
        assert rule is not None and win is not None
        money = rule.unit == "m"
        want = self.cost_estimate if money else self.estimate
        mine = self.held(i, check) if held is None else held
        # the fields' tuple goes as a JSON array, as a list would
        return ["bud", check.limit, want, win.fields, win.add, int(rule.soft), win.oldest, win.ttl, int(money), mine]

    def held(self, i: int, check: Check) -> str:
        """The reservation this request holds under budget check ``i``, as the scripts name it
        (``<lease>|<field>|<worst case>``, the amount the holder's expiry takes back); "" for none."""
        rule, win = check.rule, self.windows[i]
        assert rule is not None and win is not None
        want = self.cost_estimate if rule.unit == "m" else self.estimate
        return f"{self.lease}|{win.add}|{want}" if want > 0 else ""

    def renewals(self) -> tuple[list[str], list[str]]:
        """The sorted sets this request holds a member of, and the members: its concurrency leases and
        its budgets' reservations (RENEW keeps them from expiring while it runs)."""
        keys, members = list(self.layout.concurrency_keys), [self.lease] * len(self.layout.concurrency_keys)
        if self.layout.budgets:
            for i, c in enumerate(self.checks):
                if c.kind == "bud" and (member := self.held(i, c)):
                    keys.append(f"{c.key}:held")
                    members.append(member)
        return keys, members


def new_lease() -> str:
    """A concurrency lease's id: random, so replicas never need to agree on one."""
    return f"{getrandbits(96):024x}"


def tag(team: str) -> str:
    return "llmgw:{" + team + "}"


def usage_key(team: str, now: float | None = None) -> str:
    bucket = int((now if now is not None else time.time()) // USAGE_BUCKET_SECONDS) * USAGE_BUCKET_SECONDS
    return f"{tag(team)}:usage:{bucket}"


def estimate_prompt(request: InternalRequest) -> int:
    """The prompt's tokens, at most: an upper bound from every field that carries prompt text
    (``gateway.core.prompt``), so a budget reserves no less than the prompt can cost."""
    return prompt_bound(request)


def prompt_calls(request: InternalRequest) -> int:
    """How many times the prompt may be billed: once per seed of a per-choice seed list, which a
    target taking one seed is sent as that many calls (``gateway.routing.fanout``), each reporting
    the whole prompt; once otherwise."""
    seeds = request.sampling.seeds
    return len(seeds) if seeds and Feature.SEED_PER_CHOICE in request.features else 1


def estimate_tokens(request: InternalRequest, prompt: int) -> int:
    """The prompt's estimate plus the most the answer may use, for every choice generated (``best_of``
    generates that many, and each is billed); an embedding's answer is vectors: no tokens."""
    if request.operation is Operation.EMBEDDING:
        return prompt
    sampling = request.sampling
    most = completion_bound(sampling)
    return prompt + most * max(1, len(request.prompts)) * max(sampling.n, sampling.best_of or 1)


def completion_bound(sampling: Sampling) -> int:
    """The most tokens one choice's answer may use, as a worst case counts them: the client's bound,
    else ``DEFAULT_MAX_TOKENS_ESTIMATE`` (no less than the least the client asked for)."""
    least = max(sampling.min_tokens or 0, sampling.min_total_tokens or 0)
    return sampling.max_tokens or sampling.max_total_tokens or max(DEFAULT_MAX_TOKENS_ESTIMATE, least)


def bounded(request: InternalRequest) -> InternalRequest:
    """``request`` with the bound its worst case counted sent to the target where the client set
    none: a target's own default (vLLM's: the rest of the context; an Anthropic target's: 4,096)
    would let one answer pass a hard budget by more than was reserved for it."""
    sampling = request.sampling
    if request.operation is Operation.EMBEDDING or sampling.max_tokens or sampling.max_total_tokens:
        return request
    return dataclasses.replace(request, sampling=dataclasses.replace(sampling, max_tokens=completion_bound(sampling)))


def checks_for(prefix: str, scope: str, values: LimitValues) -> list[Check]:
    out: list[Check] = []
    if values.rpm:
        out.append(Check(f"{prefix}:rpm", "rpm", values.rpm, str(values.rpm_burst or values.rpm), scope))
    if values.tpm:
        out.append(Check(f"{prefix}:tpm", "tpm", values.tpm, "", scope))
    if values.concurrency:
        out.append(Check(f"{prefix}:conc", "conc", values.concurrency, "", scope))
    return out


Budgets = tuple[tuple[Rule, int], ...]  # a budget's rules and their limits (``spend.rules``)


def layout(
    team: str,
    key_id: str,
    team_limits: LimitValues,
    key_limits: LimitValues,
    team_budget: Budgets = (),
    key_budget: Budgets = (),
) -> Layout:
    base = tag(team)
    checks = checks_for(base, "team", team_limits)
    if key_limits.rpm or key_limits.tpm or key_limits.concurrency:  # few keys have their own limits
        checks += checks_for(f"{base}:key:{key_id}", "key", key_limits)
    checks += [Check(f"{base}:budget", "bud", limit, "", "team", rule) for rule, limit in team_budget]
    checks += [Check(f"{base}:key:{key_id}:budget", "bud", limit, "", "key", rule) for rule, limit in key_budget]
    return Layout(
        tuple(checks),
        tuple(c.key for c in checks),
        tuple(c.key for c in checks if c.kind == "conc"),
        any(c.kind == "tpm" for c in checks),
        any(c.kind == "bud" for c in checks),
        any(c.rule is not None and not c.rule.soft for c in checks),
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
    """The plan of a team with no limits: nothing to check or reserve, only the usage to count. Its
    estimate is the worst case where the client bounded the answer (0 where it did not: no default's
    bound, which its target was not sent): a stream cut short is settled by upper bounds within it,
    as a limited team's is (``RequestLog.usage``), its usage and cost summed all the same."""
    prompt = estimate_prompt(request) * prompt_calls(request)
    s = request.sampling
    worst = estimate_tokens(request, prompt) if s.max_tokens or s.max_total_tokens else 0
    return Plan(team, key_id, NO_LIMITS, worst, prompt, "", current_usage_key(team))


_windows: dict[int, tuple[Layout, float, tuple[Window | None, ...]]] = {}  # per layout (by id, kept)
MAX_LAYOUTS = 10_000  # layouts whose windows are kept (one per team key and config generation)


def windows(layout: Layout, now: float) -> tuple[Window | None, ...]:
    """Per check of ``layout``, a budget's current window (None for the other kinds): the same tuple
    until the first of them ends (a window's ``reset`` is when its period or slice ends)."""
    known = _windows.get(id(layout))
    if known is not None and known[0] is layout and now < known[1]:
        return known[2]
    current = tuple(c.rule.period.window(c.rule.unit, now) if c.rule else None for c in layout.checks)
    until = min((w.reset for w in current if w is not None), default=now)
    if len(_windows) >= MAX_LAYOUTS:  # layouts of config generations gone
        _windows.clear()
    _windows[id(layout)] = (layout, until, current)
    return current


def planned(
    team: str, key_id: str, limits: Layout, request: InternalRequest, lease: str, rate: Rate | None = None
) -> Plan:
    prompt = estimate_prompt(request) * prompt_calls(request)
    plan = Plan(team, key_id, limits, estimate_tokens(request, prompt), prompt, lease, current_usage_key(team))
    if limits.budgets:
        now = time.time()
        plan.windows = windows(limits, now)
        if rate is not None and request.operation is Operation.EMBEDDING:
            rate = rate.for_embeddings()
        if rate is not None:  # the worst case: every prompt token at its dearest, every completion token used
            plan.cost_estimate = rate.worst(prompt, plan.estimate - prompt)
    return plan


def build(
    team: str, key_id: str, team_limits: LimitValues, key_limits: LimitValues, request: InternalRequest, lease: str
) -> Plan:
    """A one-off plan (its layout built for it)."""
    return planned(team, key_id, layout(team, key_id, team_limits, key_limits), request, lease)
