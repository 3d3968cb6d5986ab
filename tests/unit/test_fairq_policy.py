"""The fair queue's policy (``gateway.limits.fairq_policy``): the class a request may ask for (a header
lowers it, never raises it; an unknown one is a 400 naming the header), the classes the config lists,
and ``capacity: auto`` learned from the replicas' gauges and kept across a reload."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.core.errors import InvalidRequest
from gateway.limits.fairq_policy import UNLEARNED, FairPolicy, FairQueues, Learner, fair_policy
from gateway.runtime.config import ConfigError, parse_config

# --- classes ------------------------------------------------------------------------------------------


def policy() -> FairPolicy:
    return fair_policy(
        parse_config(
            {
                "teams": [
                    {
                        "id": "t",
                        "priority": "batch",
                        "keys": [{"id": "vip", "sha256": "0" * 64, "priority": "interactive"}],
                    },
                    {"id": "u", "weight": 3},
                ],
                "models": [{"name": "m", "targets": [{"provider": "mock"}], "queue": {"capacity": 4}}],
            }
        )
    )


def test_a_header_lowers_the_class_and_never_raises_it() -> None:
    p = policy()
    assert p.rank("t", "other-key", None) == 1  # the team's default
    assert p.rank("t", "vip", None) == 0  # the key's own
    assert p.rank("t", "vip", "batch") == 1  # lowered
    assert p.rank("t", "other-key", "interactive") == 1  # not raised past the key's own
    assert p.rank("u", "k", None) == 0  # the first class by default
    assert p.ticket("r", "u", "k", None, None).weight == 3.0
    assert p.ticket("r", "issued-at-run-time", "k", None, None).label == "other"


def test_an_unknown_class_is_a_400_naming_the_header() -> None:
    with pytest.raises(InvalidRequest) as err:
        policy().rank("t", "k", "urgent")
    assert err.value.param == "X-Gateway-Priority"
    assert "urgent" in err.value.message and "interactive, batch" in err.value.message


def test_the_config_refuses_a_class_it_does_not_list() -> None:
    with pytest.raises(ConfigError, match=r"teams\[0\].priority: unknown class 'urgent'"):
        parse_config({"teams": [{"id": "t", "priority": "urgent"}]})
    with pytest.raises(ConfigError, match="capacity"):
        parse_config({"models": [{"name": "m", "targets": [{"provider": "mock"}], "queue": {"capacity": 0}}]})


# --- capacity: auto ------------------------------------------------------------------------------------


@dataclass
class Replica:
    running: float = 0.0
    waiting: float = 0.0
    scraped_at: float = 10.0


def test_auto_capacity_is_what_the_replicas_ran_when_they_began_to_queue() -> None:
    learner = Learner()
    a, b = Replica(running=3), Replica(running=5)
    assert learner.learn("m", [a, b], fresh_since=0.0) is None  # nobody has queued: no limit yet
    a.running, a.waiting = 4, 2  # a's batch is full at 4
    assert learner.learn("m", [a, b], 0.0) == 9  # 4 + the most b ran (5)
    b.running, b.waiting = 6, 1
    assert learner.learn("m", [a, b], 0.0) == 10
    a.running, a.waiting = 2, 3  # KV cache pressure: a now queues at 2
    assert learner.learn("m", [a, b], 0.0) == 8
    a.scraped_at, a.running, a.waiting = -1.0, 50, 0  # stale gauges teach nothing
    assert learner.learn("m", [a, b], 0.0) == 8


def test_a_learned_capacity_applies_to_an_auto_queue_only() -> None:
    config = parse_config(
        {
            "models": [
                {"name": "auto", "targets": [{"provider": "mock"}], "queue": {"capacity": "auto"}},
                {"name": "fixed", "targets": [{"provider": "mock"}], "queue": {"capacity": 3}},
            ],
            "limits": {"replicas": 2},
        }
    )
    fair = FairQueues(fair_policy(config))
    assert fair.queues["auto"].settings.capacity == UNLEARNED
    fair.learned("auto", 7, 2)
    fair.learned("fixed", 7, 2)
    assert (fair.queues["auto"].settings.capacity, fair.queues["auto"].settings.share) == (7, 4)
    assert fair.queues["auto"].local.capacity == 7
    assert fair.queues["fixed"].settings.capacity == 3


def test_a_reload_keeps_what_an_auto_queue_learned() -> None:
    data = {
        "models": [{"name": "auto", "targets": [{"provider": "mock"}], "queue": {"capacity": "auto"}}],
        "limits": {"replicas": 2},
    }
    fair = FairQueues(fair_policy(parse_config(data)))
    fair.learned("auto", 7, 2)
    data["models"][0]["queue"]["timeout"] = 5  # type: ignore[index]
    fair.configure(fair_policy(parse_config(data)))
    settings = fair.queues["auto"].settings
    assert (settings.capacity, settings.share, settings.timeout) == (7, 4, 5)
