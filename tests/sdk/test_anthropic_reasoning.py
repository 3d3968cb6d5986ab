"""The Anthropic SDK's thinking and effort through a started gateway to OpenAI's wire on the fake
upstream, which judges a chat by its model as OpenAI's API does: ``gpt`` (``gpt-4o``, no reasoning
control: it refuses ``reasoning_effort``) answers without them; ``reasoner`` (``o3`` declared with
``extra_features: [thinking, effort]``: it refuses ``max_tokens`` and efforts beyond high) gets them
as ``reasoning_effort``. Either way the SDK reads a valid message, whole and streamed, with no thinking
block (OpenAI's chat returns none); Anthropic's ``max`` effort is o3's own refusal (it has no
``xhigh``). docs/dialects.md, "Thinking and effort on every target".

``tests/sdk/drivers/drive_anthropic_reasoning.py`` runs every case in one process.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.conftest import KEY, ROOT, TEAM, Gateway, clean_env, free_port, stop, wait_health, wait_ready_line
from tests.sdk.test_anthropic_sdk import driven

pytestmark = pytest.mark.sdk

DRIVER = ROOT / "tests" / "sdk" / "drivers" / "drive_anthropic_reasoning.py"
MODELS = {"gpt": ("gpt-4o", []), "reasoner": ("o3", ["thinking", "effort"])}


def gateway_config(upstream_url: str) -> str:
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    models = "".join(
        f"  - name: {name}\n    targets:\n      - provider: openai\n        base_url: {upstream_url}\n"
        f"        model: {model}\n        extra_features: [{', '.join(extras)}]\n"
        for name, (model, extras) in MODELS.items()
    )
    return f"models:\n{models}teams:\n  - id: {TEAM}\n    keys:\n      - id: test-key\n        sha256: {digest}\n"


@pytest.fixture(scope="module")
def gateway(sdk_envs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The fake upstream on OpenAI's wire and a gateway in front of it, for this module."""
    tmp = tmp_path_factory.mktemp("reasoning-gateway")
    env = clean_env(PYTHONUNBUFFERED="1")
    procs: list[subprocess.Popen[bytes]] = []
    out, err, log = tmp / "upstream.out", tmp / "upstream.err", tmp / "gateway.log"
    try:
        with out.open("wb") as o, err.open("wb") as e, log.open("wb") as g:
            fake = [sys.executable, "-m", "tests.fakes.upstream", "--port", "0", "--kind", "openai"]
            procs.append(subprocess.Popen(fake, cwd=ROOT, stdout=o, stderr=e, env=env))
            config = tmp / "gateway.yaml"
            config.write_text(gateway_config(wait_ready_line(procs[0], out, err)))
            port = free_port()
            cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", "127.0.0.1"]
            procs.append(subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stdout=g, stderr=g, env=env))
            url = f"http://127.0.0.1:{port}"
            wait_health(url, procs[1], log)
            yield Gateway(url, log)
    finally:
        for proc in reversed(procs):
            stop(proc)


@pytest.fixture(scope="module", params=sorted(MODELS))
def runs(gateway: Gateway, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("anthropic-reasoning-home")
    return driven(gateway, home, "anthropic", DRIVER, "--model", request.param) | {"_model": request.param}


def case(runs: dict[str, Any], name: str) -> dict[str, Any]:
    got: dict[str, Any] = runs[name]
    assert got["ok"] is True, f"{name}: {got}{runs['_context']}"
    return got


@pytest.mark.parametrize("name", ["enabled", "adaptive_effort", "stream", "thoughts_back"])
def test_thinking_and_effort_are_served_with_a_text_answer(runs: dict[str, Any], name: str) -> None:
    got = case(runs, name)
    assert got["blocks"] == ["text"] and got["text"] and got["stop_reason"] in ("end_turn", "max_tokens")
    assert got["output_tokens"] > 0


def test_a_stream_has_no_thinking_events(runs: dict[str, Any]) -> None:
    events = case(runs, "stream")["events"]
    assert "text" in events and "message_stop" in events and "thinking" not in events


def test_the_deepest_effort_is_the_reasoning_models_own_refusal(runs: dict[str, Any]) -> None:
    """``gpt`` has no reasoning control: served; ``reasoner`` is asked ``xhigh``, which o3 lacks."""
    got = runs["max_effort"]
    if runs["_model"] == "gpt":
        assert got["ok"] is True and got["blocks"] == ["text"], f"{got}{runs['_context']}"
        return
    assert (got["ok"], got["error"], got["status"]) == (False, "BadRequestError", 400), f"{got}{runs['_context']}"
    assert "'xhigh'" in got["message"]
