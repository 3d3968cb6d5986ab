"""OpenAI embeddings' codec (``gateway/dialects/openai/embeddings.py``), sans IO: any bad ``input`` is
refused naming the place the message names (a client fixes the ``param`` it is told), and an
upstream's list of vectors is taken only when its indices give every input exactly one vector."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest, UpstreamMalformed
from gateway.dialects.openai.embeddings import decode, parse

JSON = Any
BAD_ID = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**31), st.floats(allow_nan=False), st.booleans())
ITEM = st.one_of(st.integers(0, 100), st.text(min_size=1, max_size=3), BAD_ID, st.none(), st.just(""))
INPUTS = st.one_of(st.lists(ITEM, max_size=6), st.lists(st.lists(ITEM, max_size=4), max_size=4))


@settings(max_examples=300, deadline=None)
@given(INPUTS)
def test_a_refusal_names_in_param_the_place_its_message_names(given_input: JSON) -> None:
    try:
        parse({"model": "e", "input": given_input})
    except InvalidRequest as err:
        assert err.param is not None and err.param.startswith("input"), (err.param, str(err))
        assert str(err).startswith(f"'{err.param}'"), (err.param, str(err))


def rows(*indices: int) -> dict[str, JSON]:
    return {"data": [{"index": i, "embedding": [float(i)]} for i in indices], "model": "up"}


def test_vectors_are_put_in_input_order() -> None:
    assert decode(rows(2, 0, 1), 3).embeddings == [[0.0], [1.0], [2.0]]


@pytest.mark.parametrize("indices", [(0, 0), (1, 1, 0)], ids=["twice-first", "twice-second"])
def test_an_index_given_twice_leaves_an_input_without_its_vector(indices: tuple[int, ...]) -> None:
    with pytest.raises(UpstreamMalformed):
        decode(rows(*indices), len(indices))
