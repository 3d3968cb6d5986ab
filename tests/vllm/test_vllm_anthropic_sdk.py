"""The Anthropic SDK (its own venv, .sdk-venvs/anthropic), unchanged but for base URL and key, through
the gateway to real vLLM on CPU, on both Messages paths: vLLM's own /v1/messages (``native``) and the
translation to chat for a replica without it (``translated``, a front that 404s the path). Greedy: the
whole answer is vLLM's own (text and token counts), the SDK's stream accumulator rebuilds it, a stop
sequence taken from it stops it there, and ``tool_choice: any`` gives a tool call or the documented 502.

The driver (tests/sdk/drivers/drive_anthropic_vllm.py) runs every case in one process; it is awaited
as a subprocess so the in-process gateway keeps serving it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.fakes.front import front
from tests.vllm.conftest import VLLM
from tests.vllm.served import served, tier_config

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "sdk" / "drivers" / "drive_anthropic_vllm.py"
PYTHON = ROOT / ".sdk-venvs" / "anthropic" / "bin" / "python"
KEY = "gw-vllm-sdk-key"
DRIVER_TIMEOUT = 600.0  # four greedy requests on a busy 2-core CPU; a bound, not a margin
# the driver's first request, as vLLM's own /v1/messages is asked it
FIRST = {"messages": [{"role": "user", "content": "the quick brown fox"}], "max_tokens": 16, "temperature": 0}


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["native", "translated"])
async def runs(vllm_tools: VLLM, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The driver's results against a gateway whose one model is the real vLLM, on one path (one run
    per path: the SDK's import and four CPU generations are most of the time)."""
    origin = vllm_tools.url.removesuffix("/v1")
    async with front({"/v1/chat": origin, "/v1/models": origin, "/tokenize": origin}) as fr:
        url = vllm_tools.url if request.param == "native" else fr.url + "/v1"
        target = {"provider": "vllm", "base_url": url, "model": vllm_tools.model}
        async with served(tier_config([{"name": "tiny", "targets": [target]}], KEY)) as gateway_url:
            out = await drive(gateway_url)
        out["_missing"] = fr.missing
    return out


async def drive(base_url: str) -> dict[str, Any]:
    """One driver run in the SDK's venv: its one JSON line, and its stderr under ``_context``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    argv = [str(DRIVER), "--base-url", base_url, "--key", KEY, "--model", "tiny"]
    proc = await asyncio.create_subprocess_exec(
        str(PYTHON), *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), DRIVER_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    lines = stdout.decode().splitlines()
    context = f"\n--- driver stderr:\n{stderr.decode()[-6000:]}"
    assert proc.returncode == 0 and len(lines) == 1, f"driver printed {stdout!r}{context}"
    out: dict[str, Any] = json.loads(lines[0])
    out["_context"] = context
    return out


async def vllm_own(vllm_tools: VLLM) -> dict[str, Any]:
    """The first request straight to vLLM's own /v1/messages: its text and token counts."""
    async with aiohttp.ClientSession() as session:
        body = {**FIRST, "model": vllm_tools.model}
        async with session.post(vllm_tools.base + "/v1/messages", json=body) as resp:
            assert resp.status == 200, await resp.text()
            got: dict[str, Any] = await resp.json()
    return got


def case(runs: dict[str, Any], name: str, ok: bool = True) -> dict[str, Any]:
    got: dict[str, Any] = runs[name]
    assert got["ok"] is ok, f"{name}: {got}{runs['_context']}"
    return got


async def test_sdk_against_real_vllm(runs: dict[str, Any], vllm_tools: VLLM) -> None:
    whole, own = case(runs, "create"), await vllm_own(vllm_tools)
    assert whole["stop_reason"] in ("end_turn", "max_tokens") and whole["stop_sequence"] is None
    assert [b["type"] for b in whole["blocks"]] == ["text"] and whole["text"] == own["content"][0]["text"]
    usage = whole["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    counts = ("input_tokens", "output_tokens")
    assert [usage[k] for k in counts] == [own["usage"][k] for k in counts]  # vLLM's own count

    streamed = case(runs, "stream")  # the SDK's accumulator, from text_delta and message_delta
    assert streamed["text"] == whole["text"] and streamed["stop_reason"] == whole["stop_reason"]
    assert streamed["usage"] == usage and streamed["events"][-1] == "message_stop"

    stopped = case(runs, "stop_sequences")
    asked, text = stopped["asked"], stopped["whole"]
    assert text == whole["text"] and asked in text  # picked from the greedy answer, not written down
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == asked, runs["_context"]
    assert stopped["text"] == text[: text.index(asked)]

    # count_tokens asks vLLM's /tokenize (chat template and generation prompt): the prompt's own count
    assert case(runs, "count_tokens")["input_tokens"] == usage["input_tokens"]

    assert runs["_missing"] in ([], ["/v1/messages"])  # translated: the 404 paid once


async def test_tool_choice_any(runs: dict[str, Any]) -> None:
    """A tool call whose input is the schema's object, or, where the model's arguments are not a JSON
    object, the documented 502 (``api_error``) as the SDK's own exception class. vLLM 0.32's own
    /v1/messages instead fails building its answer from such arguments and says 400 (a pydantic error
    on ``input``), which the gateway relays: the native path's known vLLM defect, checked by its text."""
    got = runs["tool_any"]
    if got["ok"]:
        # the tools are in the prompt through the chat template: count_tokens counts them as vLLM does
        assert case(runs, "count_tokens_tools")["input_tokens"] == got["usage"]["input_tokens"]
        (block,) = [b for b in got["blocks"] if b["type"] == "tool_use"]
        assert block["name"] == "get_weather" and got["stop_reason"] == "tool_use"
        assert isinstance(block["input"], dict) and block["input"]["city"] in ("Paris", "Oslo"), got
        return
    message = str((got.get("body") or {}).get("error", {}).get("message"))
    if got["status"] == 400 and "for AnthropicContentBlock\ninput\n  Input should be a valid dictionary" in message:
        pytest.xfail(f"vLLM's own /v1/messages cannot answer non-object tool arguments: {message}")
    assert (got["error"], got["status"], got["type"]) == ("InternalServerError", 502, "api_error"), (
        f"{got['body']}{runs['_context']}"
    )
