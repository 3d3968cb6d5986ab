"""A request's record counts each of its tries' events (fallbacks, cool-downs, failed tries, resumes,
dropped features) on its own: a request that went at once skips them with one test, which must not
skip any."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from gateway.core.request import Feature
from gateway.routing.dispatch import Attempt
from gateway.routing.resume import Resumed
from gateway.web.record import Backlog, RequestLog


def _count(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


TRIES: list[tuple[Callable[[Attempt], None], str, dict[str, str]]] = [
    (lambda a: setattr(a, "tries", 3), "gateway_retries_total", {"model": "rec-m"}),
    (lambda a: a.cooled.append("rec-t"), "gateway_cooldowns_total", {"target": "rec-t"}),
    (lambda a: a.failed.append(("rec-t", "upstream_error")), "gateway_upstream_failures_total",
     {"target": "rec-t", "code": "upstream_error"}),
    (lambda a: a.resumed.append(Resumed("rec-t", "rec-u", "upstream_error", 0.1, 5)),
     "gateway_stream_resumes_total", {"target": "rec-t", "cause": "upstream_error"}),
    (lambda a: a.dropped.append(Feature.N), "gateway_dropped_features_total", {"target": "-", "feature": "n"}),
]  # fmt: skip


@pytest.mark.parametrize(("event", "name", "labels"), TRIES)
def test_each_kind_of_try_event_alone_is_counted(
    event: Callable[[Attempt], None], name: str, labels: dict[str, str]
) -> None:
    before = _count(name, labels)
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    log.model_label = "rec-m"
    event(log.attempt)
    log.emit()
    assert _count(name, labels) > before


def test_a_request_that_went_at_once_counts_no_try_event() -> None:
    names = [(name, labels) for _, name, labels in TRIES]
    before = [_count(n, lb) for n, lb in names]
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    log.model_label, log.attempt.tries = "rec-m", 1
    log.emit()
    assert [_count(n, lb) for n, lb in names] == before


def test_a_resumed_streams_drops_are_counted_for_the_target_that_dropped_each() -> None:
    """The first target's drops under its name, a continuation's under its own, though the attempt's
    target is the last one by then."""
    first = {"target": "rec-a", "feature": "min_p"}
    then = {"target": "rec-b", "feature": "top_k"}
    before = [_count("gateway_dropped_features_total", lb) for lb in (first, then)]
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    log.model_label, log.attempt.target, log.attempt.tries = "rec-m", "rec-b", 2
    log.attempt.dropped.append(Feature.MIN_P)
    log.attempt.resumed.append(Resumed("rec-a", "rec-b", "upstream_failed", 0.1, 5, (Feature.TOP_K,)))
    log.emit()
    after = [_count("gateway_dropped_features_total", lb) for lb in (first, then)]
    assert after == [n + 1 for n in before]
