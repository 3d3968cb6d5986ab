"""What the test tiers share to wait and to start processes: ``eventually`` (wait on a condition, the
bound a hang guard), ``gateways`` (``llm-gateway serve`` as a subprocess) and ``redis_servers`` (private
Redis servers and clusters on free ports); and ``rich_bodies``, valid requests with every nested
structure and hostile values to lay in them. The fake upstream lives in ``tests/fakes``.

What does not belong here: assertions about the gateway, or fixtures of one tier."""

from tests.support.waiting import HANG_GUARD, eventually, eventually_blocking, turn

__all__ = ["HANG_GUARD", "eventually", "eventually_blocking", "turn"]
