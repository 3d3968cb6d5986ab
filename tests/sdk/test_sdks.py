"""Each vendor's own Python SDK, unchanged but for its base URL, against a running gateway: a
completion, a stream, chat, a bad key (401), a key used for another team (403) and a malformed body
(4xx, never 5xx). Each SDK runs from its own virtual environment (scripts/sdk-envs)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest

from tests.sdk.conftest import KEY, ROOT, Running

pytestmark = pytest.mark.sdk

# (venv, driver, flavour) → the cases that SDK can express. Missing cases are stated, not skipped:
# octoai's dialect has no team header, so "wrong_team" cannot be asked of either OctoAI SDK, nor of
# Friendli's container paths (the Friendli spec declares no team header there).
ALL = ("complete", "stream", "chat", "chat_stream", "bad_key", "wrong_team", "malformed")
NO_TEAM = tuple(c for c in ALL if c != "wrong_team")
SDKS = {
    ("openai", "openai", ""): ALL,
    ("friendli", "friendli", "serverless"): ALL,
    ("friendli", "friendli", "dedicated"): ALL,
    ("friendli", "friendli", "container"): NO_TEAM,
    ("friendli-client", "friendli_client", ""): ALL,
    ("scale-gp", "scale_gp", ""): ALL,
    ("scale-gp-beta", "scale_gp", ""): ALL,
    ("octoai", "octoai", ""): NO_TEAM,
    ("octoai-sdk", "octoai_sdk", ""): NO_TEAM,
}
# friendli-client's 2024 ``Completion`` model has no finish_reason field and drops unknown keys.
FINISH_NOT_EXPOSED = {("friendli-client", "complete")}
CELLS = [(sdk, case) for sdk, cases in SDKS.items() for case in cases]


def drive(gw: Running, venv: str, driver: str, flavour: str, case: str) -> dict[str, object]:
    python = ROOT / ".sdk-venvs" / venv / "bin" / "python"
    args = [str(python), str(ROOT / "tests" / "sdk" / "drivers" / f"drive_{driver}.py"), "--base-url", gw.url]
    args += ["--key", KEY, "--model", "tiny", "--case", case, "--team", "team1"]
    if flavour:
        args += ["--flavour", flavour]
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ["PATH"], "HOME": home, "NO_PROXY": "*"}
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"driver printed nothing\nstderr:\n{proc.stderr[-3000:]}\ngateway:\n{gw.log.read_text()[-2000:]}"
    result: dict[str, object] = json.loads(lines[-1])
    result["stderr"] = proc.stderr[-3000:]
    return result


@pytest.mark.parametrize(("sdk", "case"), CELLS, ids=[f"{s[0]}{'-' + s[2] if s[2] else ''}-{c}" for s, c in CELLS])
def test_sdk(gateway: Running, sdk: tuple[str, str, str], case: str) -> None:
    r = drive(gateway, *sdk, case)
    context = f"{r}\ngateway log tail:\n{gateway.log.read_text()[-1500:]}"
    if case in ("complete", "stream", "chat", "chat_stream"):
        assert r["ok"], context
        assert r["text"], context
        expected = ("not-exposed",) if (sdk[0], case) in FINISH_NOT_EXPOSED else ("stop", "length")
        assert r["finish_reason"] in expected, context
    elif case == "bad_key":
        assert not r["ok"] and r["status"] == 401, context
    elif case == "wrong_team":
        assert not r["ok"] and r["status"] == 403, context
    else:
        status = r["status"]
        assert not r["ok"] and isinstance(status, int) and 400 <= status < 500, context


@pytest.mark.parametrize("sdk", list(SDKS), ids=lambda s: f"{s[0]}{'-' + s[2] if s[2] else ''}")
def test_stream_matches_whole_answer(gateway: Running, sdk: tuple[str, str, str]) -> None:
    whole, streamed = drive(gateway, *sdk, "complete"), drive(gateway, *sdk, "stream")
    assert whole["text"] == streamed["text"], (whole, streamed)
