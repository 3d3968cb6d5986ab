"""The pinned openai SDK's request fields against the gateway's bodies: every field of chat
completions, completions, embeddings and Responses create params is either modelled by the gateway's
body for that API or listed, with why, among those it refuses by name (``tests/support/
openai_sdk_fields.py``). A field a new SDK adds fails here, named, until it is decided: served, passed
on to OpenAI targets, or refused. Each listed refusal, sent by the SDK itself, comes back as its
``BadRequestError`` whose error object names the field (the unit tier checks the same refusals without
the SDK, ``tests/unit/test_openai_sdk_fields.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.conftest import MODEL, ROOT, Gateway
from tests.sdk.test_anthropic_sdk import driven
from tests.support.openai_sdk_fields import APIS, Api

pytestmark = pytest.mark.sdk

DRIVER = ROOT / "tests" / "sdk" / "drivers" / "drive_openai_fields.py"
TABLE = "tests/support/openai_sdk_fields.py"
REFUSALS = [(api, field) for api in APIS for field in api.unmodelled]


@pytest.fixture(scope="module")
def runs(gateway: Gateway, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home: Path = tmp_path_factory.mktemp("openai-fields-home")
    refuse = [[api.name, field, value] for api in APIS for field, (value, _why) in api.unmodelled.items()]
    return driven(gateway, home, "openai", DRIVER, "--model", MODEL, "--refuse", json.dumps(refuse))


@pytest.mark.parametrize("api", APIS, ids=[api.name for api in APIS])
def test_every_sdk_field_is_modelled_or_refused_by_name(runs: dict[str, Any], api: Api) -> None:
    sdk = set(runs["fields"][api.name])
    undecided = sorted(sdk - api.modelled() - set(api.unmodelled))
    assert not undecided, (
        f"openai {runs['version']} sends {api.name} field(s) {undecided} that {api.body.__name__} does not model: "
        f"serve or pass them on in the dialect, or list them in {TABLE} with why they are refused"
    )
    gone = sorted(set(api.unmodelled) - sdk)
    assert not gone, f"{TABLE} lists {api.name} field(s) {gone} that openai {runs['version']} no longer has"


@pytest.mark.parametrize(("api", "field"), REFUSALS, ids=[f"{api.name}-{field}" for api, field in REFUSALS])
def test_the_sdk_surfaces_each_refusal_naming_its_field(runs: dict[str, Any], api: Api, field: str) -> None:
    got = runs["refused"][api.name][field]
    assert (got["ok"], got["error"], got["status"]) == (False, "BadRequestError", 400), f"{got}{runs['_context']}"
    # the SDK hands over the error object itself (the envelope's ``error``)
    assert (got["body"]["type"], got["body"]["param"]) == ("invalid_request_error", field), got
