"""Anthropic's error envelope has no field for the parameter at fault (OpenAI's has ``param``): its
message names it, in Anthropic's own way (``top_p: ...``) unless it already does, whatever raised it:
the gateway's checks or an upstream's refusal relayed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest, UpstreamRejected
from gateway.dialects.anthropic.render import error_object

PARAMS = st.from_regex(r"[a-z_]{1,12}(\.[a-z_]{1,8}|\[[0-9]\])?", fullmatch=True)


@given(PARAMS, st.text(max_size=40))
def test_an_upstream_refusal_names_its_parameter_in_the_message(param: str, said: str) -> None:
    err = UpstreamRejected(f"upstream rejected the request: {said}", status=400, param=param)
    message = error_object(err)["error"]["message"]
    assert message.startswith(f"{param}: ") or f"'{param}" in said
    assert message.endswith(err.message)


def test_a_message_that_names_its_parameter_is_left_as_it_is() -> None:
    for err in (
        InvalidRequest("'max_tokens' must be at least 1", param="max_tokens"),
        InvalidRequest("limit: Input should be an integer", param="limit"),
        InvalidRequest("'messages[1].content[1]': not an image", param="messages[1].content"),
        InvalidRequest("no parameter at fault"),
    ):
        assert error_object(err)["error"]["message"] == err.message
