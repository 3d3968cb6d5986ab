"""The openai SDK's models API (``models.list``, ``models.retrieve``), unchanged but for its base URL, on
every base the gateway lists models under (``routes.MODEL_LIST_PATHS``): OpenAI's model object, an id
with a slash (the SDK sends it as ``%2F``), and an unknown model as OpenAI answers it (404,
``invalid_request_error``, ``model_not_found``) raised as the SDK's ``NotFoundError``. The Anthropic SDK's
side (retrieve, auto-pagination) is in ``test_anthropic_sdk.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.web.routes import MODEL_LIST_PATHS
from tests.sdk.conftest import ALIAS, MODEL, ROOT, Gateway
from tests.sdk.test_anthropic_sdk import driven

pytestmark = pytest.mark.sdk

DRIVER = ROOT / "tests" / "sdk" / "drivers" / "drive_openai_models.py"
BASES = [path.removesuffix("/models") for path in MODEL_LIST_PATHS]


@pytest.fixture(scope="module")
def runs(gateway: Gateway, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home: Path = tmp_path_factory.mktemp("openai-models-home")
    args = ["--model", MODEL, "--alias", ALIAS, *[arg for base in BASES for arg in ("--base", base)]]
    return driven(gateway, home, "openai", DRIVER, *args)


@pytest.mark.parametrize("base", BASES)
def test_models_on_every_base(runs: dict[str, Any], base: str) -> None:
    got, context = runs[base], runs["_context"]
    assert all(got[name]["ok"] for name in ("list", "retrieve", "retrieve_alias")), f"{got}{context}"
    assert {MODEL, ALIAS} <= set(got["list"]["ids"])
    card = got["retrieve"]
    assert (card["id"], card["object"], card["owned_by"]) == (MODEL, "model", "llm-gateway")
    assert isinstance(card["created"], int)
    assert got["retrieve_alias"]["id"] == ALIAS
    missing = got["retrieve_missing"]
    assert (missing["ok"], missing["error"], missing["status"]) == (False, "NotFoundError", 404), f"{missing}{context}"
    # the SDK hands over the error object itself (the envelope's ``error``)
    assert {k: missing["body"][k] for k in ("type", "code", "param")} == {
        "type": "invalid_request_error",
        "code": "model_not_found",
        "param": "model",
    }
