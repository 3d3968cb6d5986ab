"""The openai SDK's Responses and embeddings APIs, unchanged but for base URL and key, against a started
gateway in front of the scripted upstream (``tests/fakes/scripted.py``): responses whole and streamed
(events and the SDK's accumulating helper), a function-call round trip via ``function_call_output``,
``previous_response_id`` across two turns on a target with no state of its own, retrieve, delete,
input_items, ``store: false``, another team's id answered 404; embeddings with strings, token ids,
base64 and ``dimensions``. The driver (``drivers/drive_openai_responses.py``) runs the checks in one
process. With ``openai-agents`` installed (``scripts/sdk-envs``), a one-tool agent runs through the
gateway and finishes (``drivers/drive_openai_agents.py``).

The same SDKs against an OpenAI target's own /v1/responses (the wire fake's, ``--kind openai``):
hosted tools and their typed items and events, the chain on OpenAI's state, a function-call round
trip, and the agent (``drivers/drive_openai_responses_native.py``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.sdk.conftest import ROOT, Gateway, clean_env, free_port, stop, wait_health, wait_ready_line

KEY = "gw-responses-0123456789abcdef"
OTHER_KEY = "gw-responses-other-team-0123"
DRIVER_TIMEOUT = 120.0


def config(upstream: str, native: str) -> str:
    digest, other = (hashlib.sha256(k.encode()).hexdigest() for k in (KEY, OTHER_KEY))
    return f"""models:
  - name: agent
    targets:
      - {{provider: openai, base_url: {upstream}, model: scripted}}
  - name: native
    targets:
      - {{provider: openai, base_url: {native}, model: up-model}}
  - name: embed
    kind: embedding
    targets:
      - {{provider: vllm, base_url: {upstream}, model: scripted-embed}}
teams:
  - id: team1
    keys: [{{id: k1, sha256: {digest}}}]
  - id: team2
    keys: [{{id: k2, sha256: {other}}}]
"""


@pytest.fixture(scope="module")
def scripted_gateway(sdk_envs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("responses-gateway")
    env = clean_env(PYTHONUNBUFFERED="1")
    files: list[IO[bytes]] = []
    procs: list[subprocess.Popen[bytes]] = []

    def log_file(name: str) -> tuple[Path, IO[bytes]]:
        path = tmp / name
        files.append(f := path.open("wb"))
        return path, f

    try:
        (out, out_f), (err, err_f) = log_file("scripted.out"), log_file("scripted.err")
        upstream = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.scripted"], cwd=ROOT, stdout=out_f, stderr=err_f, env=env
        )
        procs.append(upstream)
        url = wait_ready_line(upstream, out, err)
        (out, out_f), (err, err_f) = log_file("wire.out"), log_file("wire.err")
        cmd = [sys.executable, "-m", "tests.fakes.upstream", "--kind", "openai"]
        procs.append(wire := subprocess.Popen(cmd, cwd=ROOT, stdout=out_f, stderr=err_f, env=env))
        native = wait_ready_line(wire, out, err)
        (tmp / "gateway.yaml").write_text(config(url, native))
        port = free_port()
        log, log_f = log_file("gateway.log")
        cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(tmp / "gateway.yaml"), "--port", str(port)]
        procs.append(gw := subprocess.Popen(cmd, cwd=ROOT, stdout=log_f, stderr=subprocess.STDOUT, env=env))
        base = f"http://127.0.0.1:{port}"
        wait_health(base, gw, log)
        yield Gateway(base, log)
    finally:
        for proc in reversed(procs):
            stop(proc)
        for f in files:
            f.close()


def run_driver(gateway: Gateway, sdk: str, driver: str, *args: str) -> dict[str, Any]:
    python = ROOT / ".sdk-venvs" / sdk / "bin" / "python"
    argv = [str(python), str(ROOT / "tests" / "sdk" / "drivers" / driver), "--base-url", gateway.url, *args]
    offset = gateway.log_size()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=DRIVER_TIMEOUT, env=clean_env())
    context = (
        f"\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr[-4000:]}\n--- gateway:\n{gateway.log_since(offset)}"
    )
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"the driver must print one JSON line{context}"
    result: dict[str, Any] = json.loads(lines[0])
    result["context"] = context
    return result


def test_openai_sdk_responses_and_embeddings(scripted_gateway: Gateway) -> None:
    args = ("--key", KEY, "--other-key", OTHER_KEY, "--model", "agent", "--embed-model", "embed")
    result = run_driver(scripted_gateway, "openai", "drive_openai_responses.py", *args)
    failed = "\n".join(f"{name}: {why}" for name, why in result["failed"].items())
    assert result["ok"], f"{failed}{result['context']}"
    assert len(result["passed"]) == 12, result["passed"]


def test_openai_agents_one_tool_agent(scripted_gateway: Gateway) -> None:
    result = run_driver(scripted_gateway, "openai-agents", "drive_openai_agents.py", "--key", KEY, "--model", "agent")
    assert result["ok"], f"{result.get('error')}{result['context']}"
    assert result["final_output"] == "the tool said: sunny in Paris", result
    assert result["tool_calls"] == [{"city": "Paris"}], result


def test_openai_sdk_on_an_openai_targets_own_responses(scripted_gateway: Gateway) -> None:
    args = ("--key", KEY, "--other-key", OTHER_KEY, "--model", "native")
    result = run_driver(scripted_gateway, "openai", "drive_openai_responses_native.py", *args)
    failed = "\n".join(f"{name}: {why}" for name, why in result["failed"].items())
    assert result["ok"], f"{failed}{result['context']}"
    assert len(result["passed"]) == 5, result["passed"]


def test_openai_agents_on_an_openai_targets_own_responses(scripted_gateway: Gateway) -> None:
    result = run_driver(scripted_gateway, "openai-agents", "drive_openai_agents.py", "--key", KEY, "--model", "native")
    assert result["ok"], f"{result.get('error')}{result['context']}"
    # the wire fake calls the tool with its answer's first word, then answers in words of its own
    (called,) = result["tool_calls"]
    assert isinstance(called["city"], str) and called["city"], result
    assert isinstance(result["final_output"], str) and result["final_output"].strip(), result
