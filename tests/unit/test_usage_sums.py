"""A team without limits has nothing to reserve or correct: its plan is built without checks, and its
requests' usage settles as one sum per usage hash and key per settler round."""

from __future__ import annotations

from gateway.core.prompt import bound
from gateway.core.request import InternalRequest, Operation
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy
from gateway.limits.limiter import Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues


class Recording(LocalLimiter):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Settlement]] = []

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        self.batches.append(items)
        await super().settle(items, urgent)


async def test_requests_without_limits_settle_as_one_sum_per_key() -> None:
    limiter = Recording()
    admission = Admission(limiter, {"capped": TeamPolicy(limits=LimitValues(rpm=1000))}, Settings())
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x" * 40,))
    for key, prompt, completion in [("k1", 3, 5), ("k1", 4, None), ("k2", 1, 1)]:
        plan = await admission.admit(Ask("free", key, request))
        assert not plan.checks and plan.prompt_estimate == bound(request) > 40
        admission.release(plan, prompt, completion)
    capped = await admission.admit(Ask("capped", "k1", request))
    assert capped.checks
    admission.release(capped, 2, 2)
    await admission._settle_pending()
    (batch,) = limiter.batches
    sums = {(s.plan.team, s.plan.key_id): (s.requests, s.prompt, s.completion) for s in batch}
    assert sums == {("free", "k1"): (2, 7, 5), ("free", "k2"): (1, 1, 1), ("capped", "k1"): (1, 2, 2)}
    (free_usage,) = [v for k, v in limiter.counters.items() if "{free}" in k]
    assert free_usage["requests"] == 3 and free_usage["key:k1:requests"] == 2
    assert free_usage["prompt_tokens"] == 8 and free_usage["completion_tokens"] == 6
    assert not admission.usage  # nothing left for the next round


async def test_a_plan_is_released_once() -> None:
    admission = Admission(Recording(), {}, Settings())
    plan = await admission.admit(Ask("free", "k1", InternalRequest(Operation.COMPLETION, model="m")))
    admission.release(plan, 1, 1)
    admission.release(plan, 1, 1)
    assert admission.usage[(plan.usage_key, "k1", "", "")][1] == [1, 1, 1, 0]  # requests, tokens, cost


async def test_an_unlimited_teams_plan_comes_at_once_as_admit_makes_it() -> None:
    admission = Admission(Recording(), {"capped": TeamPolicy(limits=LimitValues(rpm=1000))}, Settings())
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x" * 40,))
    at_once = admission.unlimited("free", "k1", request)
    admitted = await admission.admit(Ask("free", "k1", request))
    assert at_once is not None and at_once.checks == admitted.checks == ()
    assert (at_once.team, at_once.key_id, at_once.prompt_estimate, at_once.usage_key) == (
        admitted.team,
        admitted.key_id,
        admitted.prompt_estimate,
        admitted.usage_key,
    )
    assert admission.unlimited("capped", "k1", request) is None  # limits apply: admit
