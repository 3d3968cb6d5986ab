"""An upstream's error envelope read for its message and the field it names: every vendor's shape,
and vLLM's message convention where the envelope has no field of its own (a fuzzed SGP client once got
``{"detail": "... (parameter=prompt)"}`` and no ``param``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.failures import upstream_message

CASES = [
    ({"error": {"message": "bad", "param": "top_k"}}, ("bad", "top_k")),
    ({"error": {"message": "bad (parameter=prompt)", "param": None}}, ("bad (parameter=prompt)", "prompt")),
    (
        {"detail": "Either prompt must be given. (parameter=prompt)"},
        ("Either prompt must be given. (parameter=prompt)", "prompt"),
    ),
    ({"detail": "t must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"}, None),
    ({"message": "plain"}, ("plain", None)),
    ({"error": {"message": "m", "param": {"not": "a name"}}}, ("m", None)),
    ({"detail": [{"loc": ["body", "x"]}]}, None),
]


@pytest.mark.parametrize(("body", "want"), CASES)
def test_each_envelope_gives_its_message_and_field(body: object, want: tuple[str, str | None] | None) -> None:
    message, param = upstream_message(json.dumps(body).encode())
    if want is not None:
        assert (message, param) == want
    assert param is None or param.isidentifier() or param in json.dumps(body)
    if "parameter=temperature" in message:
        assert param == "temperature"


@given(
    st.binary(max_size=300)
    | st.recursive(st.none() | st.text(max_size=20), lambda c: st.dictionaries(st.text(max_size=8), c, max_size=4)).map(
        lambda v: json.dumps(v).encode()
    )
)
def test_any_body_gives_a_string_message_and_a_string_or_no_field(body: bytes) -> None:
    message, param = upstream_message(body)
    assert isinstance(message, str) and (param is None or isinstance(param, str))
