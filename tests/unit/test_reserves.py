"""The bookkeeping of admissions made ahead (``gateway.limits.advance``), sans IO."""

from __future__ import annotations

from gateway.core.request import InternalRequest, Operation
from gateway.limits import plan as planning
from gateway.limits.advance import Reserves
from gateway.limits.plan import LimitValues

REQUEST = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",))


def test_none_is_asked_for_while_the_keys_own_admissions_are_out() -> None:
    # a burst: a reserve asked for now could be answered after its last request, held while Redis
    # refuses others; only the admission that finds none of its key's out asks
    plan = planning.build("t", "k", LimitValues(rpm=1000), LimitValues(), REQUEST, "l0")
    keys = plan.layout.keys
    reserves = Reserves()
    assert reserves.wanted(plan, 0.0, plan.estimate) is None  # the key's first request
    reserves.on_path[keys] = 1
    assert reserves.wanted(plan, 0.1, plan.estimate) is None
    del reserves.on_path[keys]
    ahead = reserves.wanted(plan, 0.2, plan.estimate)
    assert ahead is not None and keys in reserves.asking and ahead.lease != plan.lease
