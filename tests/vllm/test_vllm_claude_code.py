"""Claude Code (npm ``@anthropic-ai/claude-code``, its native binary) in print mode through the gateway
to real vLLM (CPU, the tiny model) under a model name of the team's: what it sends by default (its
betas, experimental ones included, adaptive thinking, ``output_config.effort``, thinking clearing that
keeps all, a system turn after the first message, its tools) and with
``CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1`` goes to vLLM's own /v1/messages, or to its chat path
where the replica lacks that path, and is answered. The tiny model's words are noise; what is
checked is that every request was served."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.front import front
from tests.integration.test_claude_code import BINARY, RUN_TIMEOUT
from tests.vllm.conftest import VLLM
from tests.vllm.served import served, tier_config

pytestmark = pytest.mark.vllm
KEY = "gw-claude-code-key"


@pytest.fixture(params=["messages", "chat"])
async def gateway_url(vllm_tools: VLLM, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The gateway in front of vLLM: straight (its own /v1/messages) or through a front that has only
    its chat route (a replica without /v1/messages: the gateway translates after one 404)."""
    origin = vllm_tools.url.removesuffix("/v1")
    routes = {"/v1": origin} if request.param == "messages" else {"/v1/chat": origin, "/v1/models": origin}
    async with front(routes) as fr:
        target = {"provider": "vllm", "base_url": fr.url + "/v1", "model": "tiny"}
        async with served(tier_config([{"name": "team-coder", "targets": [target]}], KEY)) as url:
            yield url


@pytest.mark.skipif(not BINARY.exists(), reason=f"Claude Code is not installed at {BINARY}")
@pytest.mark.parametrize("experimental", [True, False], ids=["default", "no-experimental-betas"])
async def test_claude_code_answers_from_vllm(gateway_url: str, tmp_path: Path, experimental: bool) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway_url,
        "ANTHROPIC_AUTH_TOKEN": KEY,
        "ANTHROPIC_MODEL": "team-coder",
        "ANTHROPIC_SMALL_FAST_MODEL": "team-coder",
        **({} if experimental else {"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1"}),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "16",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    argv = [str(BINARY), "-p", "say hi", "--output-format", "json"]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=work, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
    result = json.loads(out.decode().strip().splitlines()[-1])
    # The tiny random model never ends its answer: it runs to the token cap, which Claude Code reports
    # as its own error after a served answer (newer versions first ask the model to go on, a few turns);
    # any refusal or upstream error would be an API error with its status.
    assert result["api_error_status"] is None and result["num_turns"] >= 1, (json.dumps(result), err.decode()[-3000:])
    assert "exceeded the 16 output token maximum" in result["result"], result
