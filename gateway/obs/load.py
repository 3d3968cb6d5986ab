"""Per-model load, the signals an autoscaler reads: requests in flight, requests waiting in admission
for a concurrency slot, and the tokens those waiting requests are estimated to need (their prompt's
estimate plus the most their answer may use, as admission reserves them).

An app owns one ``Load``; the pipeline counts a request in flight from the moment its model is known
to its end (waiting included), and admission counts it waiting while it waits. Each figure is a
``LevelTally``: a plain number on the event loop, set on its gauge when the app's tallies are
flushed (``metrics.flush``). The model label is the route's (``Route.label``): bounded. What does not
belong here: the vLLM replicas' own gauges (``backends/pool/replicas.py`` scrapes them).
"""

from __future__ import annotations

from gateway.obs import metrics as m


class ModelLoad:
    """One model's three levels."""

    __slots__ = ("in_flight", "queued", "queued_tokens")

    def __init__(self, model: str, owner: m.Tallies) -> None:
        self.in_flight = m.LevelTally(m.MODEL_IN_FLIGHT.labels(model), owner)
        self.queued = m.LevelTally(m.MODEL_QUEUE_DEPTH.labels(model), owner)
        self.queued_tokens = m.LevelTally(m.MODEL_QUEUED_TOKENS.labels(model), owner)

    def wait_began(self, tokens: int) -> None:
        self.queued.n += 1
        self.queued_tokens.n += tokens

    def wait_ended(self, tokens: int) -> None:
        self.queued.n -= 1
        self.queued_tokens.n -= tokens


class Load:
    """An app's per-model levels, made at each model's first request."""

    __slots__ = ("models", "tallies")

    def __init__(self) -> None:
        self.models: dict[str, ModelLoad] = {}
        self.tallies = m.Tallies()

    def of(self, model: str) -> ModelLoad:
        load = self.models.get(model)
        if load is None:
            load = self.models[model] = ModelLoad(model, self.tallies)
        return load
