"""The limits' edge (issue 24 items 10 and 13): usage figures are clamped to integers Redis takes
before any store sees them, and a request that waited for a concurrency slot until its deadline (its
own, its team's or ``admission_timeout``) ends with ``DeadlineExceeded``, which each dialect answers
its own way: 504, or 429 for Friendli's clients."""

from __future__ import annotations

import pytest

from gateway.core.errors import DeadlineExceeded, RateLimited
from gateway.core.request import InternalRequest, Operation
from gateway.dialects import DIALECTS
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy
from gateway.limits.limiter import MAX_TOKENS, tokens
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues

REQUEST = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",))
ONE_SLOT = {"t": TeamPolicy(LimitValues(concurrency=1))}


@pytest.mark.parametrize(
    ("reported", "settled"),
    [
        (12, 12),
        (12.9, 12),
        (1e20, MAX_TOKENS),
        (float("inf"), MAX_TOKENS),
        (10**30, MAX_TOKENS),
        (-3, 0),
        (float("-inf"), 0),
        (float("nan"), None),
        (True, None),
        ("12", None),
        (None, None),
    ],
)
def test_usage_figures_are_clamped(reported: object, settled: int | None) -> None:
    assert tokens(reported) == settled


async def test_absurd_usage_reaches_the_store_clamped() -> None:
    limiter = LocalLimiter()
    admission = Admission(limiter, ONE_SLOT, Settings())
    plan = await admission.admit(Ask("t", "k", REQUEST))
    admission.release(plan, float("inf"), 1e20)  # type: ignore[arg-type]  # what a lax decoder may pass
    (settlement,) = admission.pending
    assert (settlement.prompt, settlement.completion) == (MAX_TOKENS, MAX_TOKENS)
    assert isinstance(settlement.correction, int)


@pytest.mark.parametrize("team_deadline", [None, 0.1])
async def test_waiting_out_the_admission_timeout_is_a_deadline_not_a_refusal(team_deadline: float | None) -> None:
    teams = {"t": TeamPolicy(LimitValues(concurrency=1), deadline=team_deadline)}
    admission = Admission(LocalLimiter(), teams, Settings(admission_timeout=0.1))
    await admission.admit(Ask("t", "k", REQUEST, admission.deadline_for("t", REQUEST)))
    with pytest.raises(DeadlineExceeded) as caught:
        await admission.admit(Ask("t", "k", REQUEST, admission.deadline_for("t", REQUEST)))
    err = caught.value
    assert err.headers == {"X-RateLimit-Limit-Concurrency": "1"}
    statuses = {name: dialect.error(err).status for name, dialect in DIALECTS.items()}
    assert statuses == {name: 429 if name.startswith("friendli") else 504 for name in DIALECTS}


async def test_no_wait_configured_is_a_refusal() -> None:
    admission = Admission(LocalLimiter(), ONE_SLOT, Settings(admission_timeout=0))
    await admission.admit(Ask("t", "k", REQUEST))
    with pytest.raises(RateLimited):
        await admission.admit(Ask("t", "k", REQUEST))
