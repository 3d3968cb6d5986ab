"""The seed a Friendli client is told is the one its target used: drawn while parsing when the client
gave none, sent to a target that takes seeds, taken off for one that does not (then none is reported).
A stream that reports no seed (today's chunks) is given none."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Choice, Completion, Usage
from gateway.dialects import FRIENDLI, FRIENDLI_2024
from gateway.routing import dispatch


@dataclass
class Target:
    features: frozenset[Feature]


def parsed(body: dict[str, object]) -> InternalRequest:
    return FRIENDLI.parse(Operation.COMPLETION, {"model": "m", "prompt": "hi", **body}, "serverless")


def answer() -> Completion:
    return Completion("id", 1, "m", [Choice(0, "x", "length", token_ids=[])], Usage(1, 1))


def test_a_seed_is_drawn_when_the_client_gave_none_and_reported_as_sent() -> None:
    for body in ({}, {"n": 1, "top_k": 3}):  # the plain path and the full parser
        req = parsed(body)
        assert req.seed_drawn and req.sampling.seeds is not None and len(req.sampling.seeds) == 1
        assert Feature.SEED not in req.features  # not the client's: no target is refused for it
        sent = dispatch._for(req, Target(frozenset({Feature.SEED})))  # type: ignore[arg-type]
        assert sent is req  # no copy on the common path
        seed = dispatch._with_seeds(answer(), sent, Target(frozenset({Feature.SEED}))).choices[0].seed  # type: ignore[arg-type]
        assert seed == req.sampling.seeds[0]


def test_a_target_without_seeds_gets_none_and_none_is_reported() -> None:
    req = parsed({})
    sent = dispatch._for(req, Target(frozenset()))  # type: ignore[arg-type]
    assert sent.sampling.seeds is None and not sent.seed_drawn
    assert req.sampling.seeds is not None  # the parsed request itself is unchanged
    assert dispatch._with_seeds(answer(), sent, Target(frozenset())).choices[0].seed is None  # type: ignore[arg-type]


def test_one_seed_for_n_choices_reports_each_choices_own_where_the_target_derives_them() -> None:
    """vLLM samples choice j of n with ``seed + j`` (v1/engine/parallel_sampling.py): that is the seed
    that reproduces the choice, so each reports its own; elsewhere every choice reports the one seed."""
    req = parsed({"seed": 5, "n": 3, "prompt": ["a", "b"]})
    choices = [Choice(i, "x", "length", token_ids=[]) for i in range(6)]
    vllm = Target(frozenset({Feature.SEED, Feature.CHILD_SEEDS}))
    got = dispatch._with_seeds(Completion("id", 1, "m", choices, Usage(1, 1)), req, vllm)  # type: ignore[arg-type]
    assert [c.seed for c in got.choices] == [5, 6, 7, 5, 6, 7]
    choices = [Choice(i, "x", "length", token_ids=[]) for i in range(6)]
    other = Target(frozenset({Feature.SEED}))
    got = dispatch._with_seeds(Completion("id", 1, "m", choices, Usage(1, 1)), req, other)  # type: ignore[arg-type]
    assert [c.seed for c in got.choices] == [5] * 6


def test_the_clients_own_seed_is_kept() -> None:
    req = parsed({"seed": 42})
    assert not req.seed_drawn and req.sampling.seeds == (42,) and Feature.SEED in req.features
    assert dispatch._for(req, Target(frozenset())) is req  # type: ignore[arg-type]  # fit() judges it


def test_a_stream_that_reports_no_seed_is_given_none() -> None:
    for body in ({"stream": True}, {"stream": True, "n": 1, "top_k": 3}):  # the plain path and the full parser
        req = parsed(body)
        assert not req.want_seed and not req.seed_drawn and req.sampling.seeds is None
        assert parsed({**body, "seed": 7}).sampling.seeds == (7,)  # the client's own still goes
    # friendli-client's 2024 stream ends with the whole answer, seeds and all
    legacy = FRIENDLI_2024.parse(Operation.COMPLETION, {"model": "m", "prompt": "hi", "stream": True}, "serverless")
    assert legacy.want_seed and legacy.seed_drawn and legacy.sampling.seeds is not None
