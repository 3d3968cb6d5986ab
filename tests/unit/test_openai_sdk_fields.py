"""The openai SDK's request fields the gateway does not model (``tests/support/openai_sdk_fields.py``)
are refused by name: a 400 in OpenAI's envelope whose ``param`` and message name the field, never a 5xx
and never a silent drop. The table itself stays honest: none of its fields is one the gateway's body
models, and each API's smallest body parses. The sdk tier reads the pinned SDK's fields against the
same table (``tests/sdk/test_openai_sdk_fields.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.errors import GatewayError
from tests.support.openai_sdk_fields import APIS, Api

CASES = [(api, field, value) for api in APIS for field, (value, _why) in api.unmodelled.items()]
CASE_IDS = [f"{api.name}-{field}" for api, field, _value in CASES]


def parsed(api: Api, body: dict[str, Any]) -> Any:
    spec = api.route()
    return spec.dialect.select(body, {}).parse(spec.operation, body, spec.flavour)


@pytest.mark.parametrize(("api", "field", "value"), CASES, ids=CASE_IDS)
def test_an_unmodelled_sdk_field_is_refused_by_name(api: Api, field: str, value: Any) -> None:
    body = api.smallest | {field: value}
    with pytest.raises(GatewayError) as info:
        parsed(api, body)
    reply = api.route().dialect.select(body, {}).error(info.value)
    error = reply.body["error"]
    assert (reply.status, error["type"], error["param"]) == (400, "invalid_request_error", field), reply
    assert repr(field) in error["message"], reply


@pytest.mark.parametrize("api", APIS, ids=[api.name for api in APIS])
def test_the_table_lists_no_modelled_field_and_its_smallest_body_parses(api: Api) -> None:
    modelled = sorted(api.modelled() & set(api.unmodelled))
    assert not modelled, f"{api.body.__name__} models {modelled}: take them out of the table of refusals"
    assert parsed(api, dict(api.smallest)) is not None
