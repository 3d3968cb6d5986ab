"""Records (gateway/core/records.py) are frozen for the type checker, equal and hashable by value, and
built with plain attribute stores."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from mypy import api

from gateway.core.records import replaced
from gateway.core.request import InternalRequest, Operation, Sampling

ROOT = Path(__file__).resolve().parents[2]


def test_assigning_a_record_field_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "mutate.py"
    snippet.write_text(
        "from gateway.core.request import InternalRequest, Operation, Sampling\n"
        "s = Sampling()\n"
        "s.max_tokens = 5\n"
        "r = InternalRequest(Operation.COMPLETION, model='m')\n"
        "r.model = 'other'\n"
    )
    out, _, status = api.run(
        ["--strict", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"), str(snippet)]
    )
    assert status == 1
    assert out.count("is read-only") == 2, out


def test_records_compare_and_hash_by_value_and_replace_makes_a_new_one() -> None:
    a, b = Sampling(max_tokens=3, stop=("x",)), Sampling(max_tokens=3, stop=("x",))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    c = dataclasses.replace(a, n=2)
    assert c.n == 2 and a.n == 1
    req = InternalRequest(Operation.COMPLETION, model="m", sampling=a)
    assert req == InternalRequest(Operation.COMPLETION, model="m", sampling=b)


def test_replace_copies_every_field_and_changes_only_the_named_ones() -> None:
    a = Sampling(max_tokens=3, stop=("x",), temperature=0.5)
    b = dataclasses.replace(a, seeds=(7,), n=2)
    assert (b.seeds, b.n, b.max_tokens, b.stop, b.temperature) == ((7,), 2, 3, ("x",), 0.5)
    assert a == Sampling(max_tokens=3, stop=("x",), temperature=0.5)  # the original is untouched
    with pytest.raises(TypeError):
        dataclasses.replace(a, no_such_field=1)  # type: ignore[call-arg]


def test_replaced_is_dataclasses_replace() -> None:
    """``replaced``, the request path's copy with changes, makes what ``dataclasses.replace`` makes,
    and leaves the original as it was."""
    req = InternalRequest(Operation.COMPLETION, "m", prompts=("p",), sampling=Sampling(max_tokens=3), stream=True)
    for changes in ({"resumable": True}, {"model": "n", "stream": False}, {}):
        got = replaced(req, **changes)
        assert got == dataclasses.replace(req, **changes) and got is not req
    assert not req.resumable and req.model == "m"
    assert replaced(req.sampling, max_tokens=9) == dataclasses.replace(req.sampling, max_tokens=9)
