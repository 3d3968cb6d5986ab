"""Redis faults in the limits never reach another team, a slot or usage: bad usage figures are clamped
and an error reply to one call is not an outage (issue 24 item 10); settlements Redis did not take
are held and sent when it answers (items 11, 12); an outage is logged by its changes, not per request
(item 12). Each test runs its own Redis, since it stalls or kills it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.limits import scripts
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy, running
from gateway.limits.backlog import Backlog
from gateway.limits.budget_rules import rules
from gateway.limits.failover import FailoverLimiter
from gateway.limits.limiter import MAX_TOKENS, SettleCall, Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues, build, new_lease
from gateway.limits.store import RedisLimiter
from gateway.obs import metrics
from gateway.runtime.config import RedisConfig
from gateway.runtime.spend_config import Budget
from gateway.store.redis_client import redis_client
from tests.support import eventually
from tests.support.redis_servers import RedisServer

REQUEST = InternalRequest(Operation.COMPLETION, model="m", prompts=("x" * 40,))
TEAMS = {
    "a": TeamPolicy(LimitValues(concurrency=2)),
    "b": TeamPolicy(LimitValues(rpm=1000)),
    "c": TeamPolicy(LimitValues(rpm=4, rpm_burst=4)),
    "d": TeamPolicy(
        LimitValues(concurrency=1), budget=tuple(rules(Budget(tokens=10_000, period="day"), ZoneInfo("UTC"), "EUR"))
    ),
}


def admission_on(url: str, policy: dict[str, str], timeout_ms: int = 1000) -> tuple[Admission, FailoverLimiter, Any]:
    client = redis_client(RedisConfig(url=url, timeout_ms=timeout_ms))
    limiter = FailoverLimiter(RedisLimiter(client), LocalLimiter(), policy, retry_seconds=0.5)
    return Admission(limiter, TEAMS, Settings(admission_timeout=0)), limiter, client


async def usage_of(client: Any, team: str) -> dict[str, int]:
    keys = [k async for k in client.scan_iter(match=f"llmgw:{{{team}}}:usage:*")]
    return {k.decode(): int(v) for key in keys for k, v in (await client.hgetall(key)).items()}


async def test_absurd_usage_is_clamped_and_never_closes_limits_for_another_team(
    own_redis: RedisServer, peek: Any
) -> None:
    """Item 10: 1e20 and 1e400 (inf) completion tokens settle as ``MAX_TOKENS``; another team under
    ``on_failure: closed`` is still admitted."""
    admission, limiter, client = admission_on(own_redis.url, {"rpm": "closed", "tpm": "closed", "conc": "closed"})
    try:
        for reported in (1e20, float("inf"), -5.0, float("nan")):
            plan = await admission.admit(Ask("a", "k1", REQUEST))
            admission.release(plan, 3, reported)  # type: ignore[arg-type]  # what a lax decoder may pass
            await admission._settle_pending()
        assert limiter.up and limiter.held() == 0
        await admission.admit(Ask("b", "k1", REQUEST))  # 503 before: the breaker had opened
        usage = await usage_of(peek, "a")
        assert usage["requests"] == 4 and usage["completion_tokens"] == 2 * MAX_TOKENS
        assert await peek.zcard("llmgw:{a}:conc") == 0
    finally:
        await limiter.close()
        await client.aclose()


async def test_an_error_reply_to_one_settlement_is_not_an_outage(own_redis: RedisServer, peek: Any) -> None:
    """Item 10: a script error caused by one call's arguments fails that call alone: the breaker stays
    shut, other teams are admitted, and the call's slot is still released (its usage counted as dropped)."""
    admission, limiter, client = admission_on(own_redis.url, {"rpm": "closed", "tpm": "closed", "conc": "closed"})
    try:
        plan = await admission.admit(Ask("a", "k1", REQUEST))
        assert await peek.zcard("llmgw:{a}:conc") == 1
        dropped = metrics.USAGE_DROPPED.n
        # past the clamp: HINCRBY refuses a count beyond 64 bits
        await limiter.settle([Settlement(plan, 0, 0, 10**20)])
        assert limiter.up and limiter.held() == 1 and metrics.USAGE_DROPPED.n == dropped + 1
        await admission.admit(Ask("b", "k1", REQUEST))
        await limiter.settle([])  # the settler's next round sends the lease release alone
        assert limiter.held() == 0 and await peek.zcard("llmgw:{a}:conc") == 0
    finally:
        await limiter.close()
        await client.aclose()


async def test_slots_released_during_a_stall_come_back_when_redis_answers(own_redis: RedisServer, peek: Any) -> None:
    """Item 11: two requests end while Redis stalls for 0.5 s (their settlement times out, Redis never
    runs it); their slots come back soon after, not at the lease TTL (30 s), and their usage with
    them, counted once (``tests/integration/test_settle_once.py`` has the other cases)."""
    admission, limiter, client = admission_on(own_redis.url, {"conc": "closed"}, timeout_ms=100)
    try:
        async with running(admission):
            plans = [await admission.admit(Ask("a", "k1", REQUEST)) for _ in range(2)]
            assert await peek.zcard("llmgw:{a}:conc") == 2
            # paused clients' commands wait, and are dropped with their connection when it closes
            unknown = metrics.USAGE_UNKNOWN.n
            await peek.execute_command("CLIENT", "PAUSE", "500", "ALL")
            for plan in plans:
                admission.release(plan, 3, 4)

            async def failed() -> bool:
                return not limiter.up

            await eventually(failed, "the settlement timed out")
            await peek.ping()  # answered once the pause is over

            async def freed() -> bool:
                return int(await peek.zcard("llmgw:{a}:conc")) == 0

            # The bound is what this test checks: soon after the pause, not at the lease TTL (30 s).
            await eventually(freed, "the slots back soon, not at the lease TTL", within=2)
            assert limiter.held() == 0 and metrics.USAGE_UNKNOWN.n == unknown
            usage = await usage_of(peek, "a")
            assert usage["requests"] == 2 and usage["completion_tokens"] == 8
            await admission.admit(Ask("a", "k1", REQUEST))
    finally:
        await client.aclose()


async def test_usage_during_an_outage_is_written_when_redis_is_back_with_a_few_log_lines(
    own_redis: RedisServer, peek: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 12: 120 requests of two teams during an outage (admitted by this process, fail-open) log its
    start and end, not a line each; their usage reaches Redis once it answers again."""
    admission, limiter, client = admission_on(own_redis.url, {})
    try:
        async with running(admission):
            await admission.admit(Ask("a", "k1", REQUEST))  # connected before the outage
            own_redis.stop()
            with caplog.at_level(logging.INFO, logger="gateway.limits"):
                for _ in range(60):
                    for team in ("a", "b"):
                        plan = await admission.admit(Ask(team, "k1", REQUEST))
                        admission.release(plan, 2, 3)
                    # a settler round in between: one batch each
                    await eventually(lambda: not admission.pending, "the settler took the batch")
                assert not limiter.up

                async def all_held() -> bool:
                    return limiter.held() == 120 and not admission.pending

                await eventually(all_held, "all 120 held, none pending")
                own_redis.start()

                async def written() -> bool:
                    usage = [await usage_of(peek, team) for team in ("a", "b")]
                    return all(u.get("requests") == 60 and u.get("completion_tokens") == 180 for u in usage)

                await eventually(written, "the outage's usage written")

                async def back() -> bool:
                    return limiter.outage.since is None  # the round trip's answer is in

                await eventually(back, "the outage over")
                assert limiter.held() == 0
            lines = [r.getMessage() for r in caplog.records if r.name == "gateway.limits"]
            assert len(lines) <= 3, lines
            assert any("redis unavailable" in line for line in lines)
            assert any("answers again" in line for line in lines)
    finally:
        await client.aclose()


async def test_held_settlements_keep_usage_whole_within_their_bound() -> None:
    """Item 12: past its capacity the backlog sums older settlements per team key: usage stays whole,
    leases beyond one per sum are given up, and the count of those is a metric."""
    backlog = Backlog(capacity=10)
    limits = LimitValues(concurrency=5)
    leases = metrics.LEASES_DROPPED.n
    plans = [build("a", "k1", limits, LimitValues(), REQUEST, new_lease()) for _ in range(25)]
    backlog.add([Settlement(p, -1, 2, 3) for p in plans])
    assert len(backlog) <= 10
    held = backlog.take()
    assert sum(s.requests for s in held) == 25 and sum(s.completion for s in held) == 75
    assert sum(s.correction for s in held) == -25
    assert metrics.LEASES_DROPPED.n - leases == 25 - len(held)


async def test_calls_kept_whole_are_never_summed_and_count_as_unknown_when_given_up() -> None:
    """A settlement's call that may have run (``failover``) is held as it went out, whatever the
    summing of the others past capacity; given up at shutdown, its usage is unknown, not dropped."""
    backlog = Backlog(capacity=10)
    plans = [build("a", "k1", LimitValues(concurrency=5), LimitValues(), REQUEST, new_lease()) for _ in range(25)]
    call = SettleCall(("k",), b"[]", [Settlement(p, 0, 1, 1) for p in plans[:5]], 0.0)
    backlog.keep(call)
    backlog.add([Settlement(p, -1, 2, 3) for p in plans[5:]])
    assert backlog.calls == [call] and len(backlog.items) <= 10
    unknown, dropped = metrics.USAGE_UNKNOWN.n, metrics.USAGE_DROPPED.n
    backlog.drop()
    assert metrics.USAGE_UNKNOWN.n - unknown == 5 and metrics.USAGE_DROPPED.n - dropped == 20
    assert len(backlog) == 0


async def test_failing_open_counts_what_redis_admitted_here_not_a_fresh_share(own_redis: RedisServer) -> None:
    """``on_failure: open`` while Redis flaps: the slots this process holds in Redis and the rate it
    used through Redis count against its in-process share, so the limits do not double (8 of 4
    concurrent, 15 req/s of 10, before)."""
    admission, limiter, client = admission_on(own_redis.url, {})
    try:
        async with running(admission):
            held = [await admission.admit(Ask("a", "k1", REQUEST)) for _ in range(2)]  # both slots, in Redis
            used = [await admission.admit(Ask("c", "k1", REQUEST)) for _ in range(4)]  # the rate's burst
            for plan in used:
                admission.release(plan, 1, 1)
            own_redis.stop()
            for team in ("a", "c"):  # each would have a fresh share without what Redis admitted here
                with pytest.raises(GatewayError) as refused:
                    await admission.admit(Ask(team, "k1", REQUEST))
                assert refused.value.status in (429, 504), refused.value
            assert not limiter.up  # the refusals were this process's share's, Redis being down
            admission.release(held[0], 1, 1)  # a slot held in Redis ends: free in the share too

            async def settled() -> bool:
                return not admission.pending

            await eventually(settled, "the release settled")
            await admission.admit(Ask("a", "k1", REQUEST))
    finally:
        await client.aclose()


async def test_a_client_gone_while_its_admission_is_out_leaves_no_slot_or_budget_held(
    own_redis: RedisServer, peek: Any
) -> None:
    """The handler is cancelled (the client hung up) while its admission waits in Redis (a paused
    Redis, as a slow one): Redis runs it all the same. Its slot and its budget's worst case come back
    with the next settlement round, not at the lease TTL (30 s), which held the team's one slot."""
    admission, limiter, client = admission_on(own_redis.url, {}, timeout_ms=2000)
    try:
        await peek.script_load(scripts.ADMIT)  # a call that waits in Redis runs once the pause is over
        await peek.execute_command("CLIENT", "PAUSE", "300", "WRITE")
        asking = asyncio.ensure_future(admission.admit(Ask("d", "k1", REQUEST)))

        async def waiting() -> bool:
            return any(c.get("cmd") == "evalsha" for c in await peek.client_list())

        await eventually(waiting, "the admission waits in Redis")
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking

        async def admitted_by_redis() -> bool:
            return int(await peek.zcard("llmgw:{d}:conc")) == 1

        await eventually(admitted_by_redis, "Redis ran the admission once its pause was over")
        await admission._settle_pending()  # the settler's next round
        assert await peek.zcard("llmgw:{d}:conc") == 0
        assert await peek.zcard("llmgw:{d}:budget:held") == 0
        assert sum(map(int, (await peek.hgetall("llmgw:{d}:budget")).values())) == 0
        await admission.admit(Ask("d", "k1", REQUEST))  # refused for 30 s before: the slot was held
    finally:
        await limiter.close()
        await client.aclose()
