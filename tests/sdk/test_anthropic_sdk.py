"""The Anthropic Python SDK, unchanged but for its base URL and key, against the gateway in front of the
fake OpenAI-compatible (vLLM) upstream: Messages whole and streamed (text and tool use, the tool
arguments reassembled by the SDK from ``input_json_delta``), a tool round trip, stop sequences,
count_tokens, the model list, every error type raised as the SDK's own exception class, and refusals
before any work (a path or method no route takes, a body the schema refuses) in Anthropic's envelope.

``tests/sdk/drivers/drive_anthropic.py`` runs every case in one process (the SDK's import is most of a
run's time) and prints one JSON object; each test here reads its case.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.conftest import ALIAS, CLAUDE_MODEL, DEAD_MODEL, KEY, MODEL, OTHER_TEAM, ROOT, TEAM, Gateway

pytestmark = pytest.mark.sdk

DRIVER = ROOT / "tests" / "sdk" / "drivers" / "drive_anthropic.py"
DRIVER_TIMEOUT = 120.0


def driven(gateway: Gateway, home: Path, sdk: str, driver: Path, *args: str) -> dict[str, Any]:
    """One driver run: its one JSON line, and what explains a failure under ``_context``."""
    python = ROOT / ".sdk-venvs" / sdk / "bin" / "python"
    argv = [str(python), str(driver), "--base-url", gateway.url, "--key", KEY, *args]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONDONTWRITEBYTECODE": "1"}
    offset = gateway.log_size()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=DRIVER_TIMEOUT, env=env, cwd=home)
    context = f"\n--- stderr:\n{proc.stderr[-6000:]}\n--- gateway:\n{gateway.log_since(offset)}"
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 1, f"driver printed {proc.stdout!r}{context}"
    out: dict[str, Any] = json.loads(lines[0])
    out["_context"] = context
    return out


@pytest.fixture(scope="module", params=[MODEL, CLAUDE_MODEL], ids=["openai-target", "anthropic-target"])
def runs(gateway: Gateway, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every case, on a model whose target speaks OpenAI's wire (the client's body translated) and on
    one whose target is Anthropic's (the client's body passed through)."""
    home = tmp_path_factory.mktemp("anthropic-home")
    args = ["--model", request.param, "--team", TEAM, "--other-team", OTHER_TEAM, "--dead-model", DEAD_MODEL]
    args += ["--alias", ALIAS]
    return driven(gateway, home, "anthropic", DRIVER, *args) | {"_model": request.param}


def case(runs: dict[str, Any], name: str, ok: bool = True) -> dict[str, Any]:
    got: dict[str, Any] = runs[name]
    assert got["ok"] is ok, f"{name}: {got}{runs['_context']}"
    return got


def test_create(runs: dict[str, Any]) -> None:
    got = case(runs, "create")
    assert got["text"] and got["stop_reason"] == "max_tokens" and got["stop_sequence"] is None
    usage = got["usage"]
    assert usage["output_tokens"] == 8 and usage["input_tokens"] > 0
    assert usage["cache_read_input_tokens"] == 0 and usage["cache_creation_input_tokens"] == 0
    assert got["request_id"]  # the SDK's ``_request_id``, read from the request-id header


def test_stream_matches_create(runs: dict[str, Any]) -> None:
    got, whole = case(runs, "stream"), case(runs, "create")
    assert got["text"] == whole["text"] and got["stop_reason"] == whole["stop_reason"]
    assert got["usage"] == whole["usage"]  # message_delta's cumulative usage overwrote message_start's zeros
    assert got["events"][0] == "message_start" and got["events"][-1] == "message_stop"
    assert "text" in got["events"]  # the SDK's own text events, built from text_delta


def test_stream_tool_use_reassembled(runs: dict[str, Any]) -> None:
    got = case(runs, "stream_tool")
    (block,) = got["blocks"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather"
    assert isinstance(block["input"], dict) and set(block["input"]) == {"city"} and block["input"]["city"]
    assert got["stop_reason"] == "tool_use"
    assert "input_json" in got["events"]  # the SDK saw input_json_delta events and joined them


def test_tool_round_trip(runs: dict[str, Any]) -> None:
    got = case(runs, "tool_round_trip")
    assert got["first"]["stop_reason"] == "tool_use" and set(got["input"]) == {"city"}
    assert got["second"]["blocks"][0]["type"] == "text" and got["second"]["text"]


def test_stop_sequence(runs: dict[str, Any]) -> None:
    got = case(runs, "stop_sequences")
    assert got["stop_reason"] == "stop_sequence" and got["stop_sequence"] == got["asked"]
    assert got["asked"] not in got["text"]


def test_count_tokens_and_models(runs: dict[str, Any]) -> None:
    assert case(runs, "count_tokens")["input_tokens"] > 0
    assert MODEL in case(runs, "models")["ids"]


def test_models_pages_as_the_sdk_follows_them(runs: dict[str, Any]) -> None:
    """More models than the limit: the SDK's iterator asks page after page and sees each model once."""
    every = case(runs, "models_all")["ids"]
    assert len(every) == 3 and {MODEL, CLAUDE_MODEL, DEAD_MODEL} == set(every)  # models' ids: no alias
    assert case(runs, "models")["ids"] == every  # one page of 20 by default
    assert case(runs, "models_paged")["ids"] == every
    # backward, a page of one at a time: the pages come nearest first, so the models in reverse
    assert case(runs, "models_before")["ids"] == every[-2::-1]
    assert case(runs, "models_deprecated")["ids"] == [] and case(runs, "models_active")["ids"] == every
    bad = case(runs, "models_bad_limit", ok=False)
    assert (bad["error"], bad["status"], bad["type"]) == ("BadRequestError", 400, "invalid_request_error")
    assert bad["message"].startswith("limit: ")


def test_models_retrieve(runs: dict[str, Any]) -> None:
    got = case(runs, "retrieve")
    assert (got["type"], got["id"], got["display_name"], got["lifecycle"]) == ("model", *[runs["_model"]] * 2, "active")
    # an alias resolves to its model's id (encoded as meta%2Ftiny by the SDK), which the list holds alone
    assert case(runs, "retrieve_alias")["id"] == MODEL
    missing = case(runs, "retrieve_missing", ok=False)
    assert (missing["error"], missing["status"], missing["type"]) == ("NotFoundError", 404, "not_found_error")


@pytest.mark.parametrize(
    ("name", "error", "status"),
    [
        ("invalid_request_error", "BadRequestError", 400),
        ("authentication_error", "AuthenticationError", 401),
        ("permission_error", "PermissionDeniedError", 403),
        ("not_found_error", "NotFoundError", 404),
        ("request_too_large", "ContentTooLargeError", 413),
        ("rate_limit_error", "RateLimitError", 429),
        ("api_error", "InternalServerError", 502),
    ],
)
def test_error_types_as_the_sdks_classes(runs: dict[str, Any], name: str, error: str, status: int) -> None:
    got = case(runs, name, ok=False)
    assert (got["error"], got["status"], got["type"]) == (error, status, name), f"{got}{runs['_context']}"
    assert got["request_id"]  # the SDK's ``APIStatusError.request_id``
    if name == "rate_limit_error":
        assert got["retry_after"] == "7"


@pytest.mark.parametrize(
    ("name", "error", "status", "kind", "named"),
    [
        ("wrong_path", "NotFoundError", 404, "not_found_error", "/v1/messages/batches/x"),
        ("unserved_api", "NotFoundError", 404, "not_found_error", "GET /v1/files"),
        ("wrong_method", "APIStatusError", 405, "invalid_request_error", "use POST"),
        ("native_block_index", "BadRequestError", 400, "invalid_request_error", "'messages[0].content[1].text'"),
        ("not_an_object", "BadRequestError", 400, "invalid_request_error", "'messages[1]' must be an object"),
    ],
)
def test_refusals_before_any_work_in_anthropics_envelope(
    runs: dict[str, Any], name: str, error: str, status: int, kind: str, named: str
) -> None:
    """A wrong path or method, a body the schema refuses: the SDK's own class, Anthropic's error type,
    and a message naming the path or the field as the client sent it."""
    got = case(runs, name, ok=False)
    assert (got["error"], got["status"], got["type"]) == (error, status, kind), f"{got}{runs['_context']}"
    assert got["envelope"] == "error" and named in got["message"], got


def test_overloaded_after_the_target_cools_down(runs: dict[str, Any]) -> None:
    seen = case(runs, "overloaded_error")["seen"]
    # the first run cools the dead target down (three failures); a later one finds it cooling
    failures = len(seen) - 1
    assert seen == [["InternalServerError", 502]] * failures + [["OverloadedError", 529]], f"{seen}{runs['_context']}"
    assert failures in (0, 3)


def test_driver_is_the_sdks_own(runs: dict[str, Any]) -> None:
    """The cases ran the SDK itself: its version is the pinned one."""
    version = subprocess.run(
        [
            str(Path(ROOT / ".sdk-venvs" / "anthropic" / "bin" / "python")),
            "-c",
            "import anthropic; print(anthropic.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"anthropic=={version}" in (ROOT / "scripts" / "sdk-envs").read_text()


def test_openai_sdk_against_an_anthropic_target(gateway: Gateway, tmp_path: Path) -> None:
    """The openai SDK's chat, streamed chat and tools (whole and streamed) on a Claude model."""
    driver = ROOT / "tests" / "sdk" / "drivers" / "drive_openai_claude.py"
    got = driven(gateway, tmp_path, "openai", driver, "--model", CLAUDE_MODEL)
    context = got.pop("_context")
    assert all(r["ok"] for r in got.values()), f"{got}{context}"
    chat, streamed = got["chat"], got["chat_stream"]
    assert chat["text"] and chat["text"] == streamed["text"] and chat["finish_reason"] == "length"
    assert chat["usage"] == streamed["usage"] and chat["usage"]["completion_tokens"] == 8
    for case in ("tools", "tools_stream"):
        assert got[case]["finish_reason"] == "tool_calls", f"{got[case]}{context}"
        (call,) = got[case]["calls"]
        assert call["name"] == "get_weather" and set(json.loads(call["arguments"])) == {"city"}
    assert got["tools"]["calls"][0]["id"] and got["tools_stream"]["calls"][0]["id"]
