"""Claude Code (npm ``@anthropic-ai/claude-code``, its native binary) in print mode, pointed at the
gateway with ``ANTHROPIC_BASE_URL`` and a gateway key, over a scripted upstream: the fake's Anthropic
wire, whose ``tool`` marker makes the first answer call Claude Code's Bash tool with ``ls``. The task
completes in two turns, and the second request carries the command's output as the tool's result.

The binary is looked for at ``$CLAUDE_CODE_BIN``, then ``.claude-code/`` (``scripts/claude-code``, which
``scripts/test`` runs, installs the pinned release there; it needs the npm registry once and runs offline
after); without it the test is skipped, saying so. The same task on the built-in ``mock`` (the quick
start's ``demo``), whose ``[mock-tool NAME ARGS]`` marker makes it call the tool, and on every
OpenAI-shaped target kind, where Claude Code's thinking and effort are advisory; vLLM's own
/v1/messages is tests/vllm/test_vllm_claude_code.py's (docs/dialects.md#claude-code).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import KEY

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(
    os.environ.get("CLAUDE_CODE_BIN")
    or ROOT / ".claude-code" / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
)
RUN_TIMEOUT = 120.0


@pytest.mark.skipif(not BINARY.exists(), reason=f"Claude Code is not installed at {BINARY}")
@pytest.mark.parametrize("name", ["claude-sonnet-4-5", "team-coder"])
async def test_claude_code_completes_a_one_tool_task(
    gateway: GatewayFactory, upstream: Any, tmp_path: Path, name: str
) -> None:
    """Under a Claude model's name, and under a name Claude Code does not know, for which it sends what
    it sends the newest models (adaptive thinking, effort, a system turn mid-conversation)."""
    server = await upstream("anthropic")
    model = {"name": name, "targets": [target(server, "anthropic")]}
    gw = await gateway(config([model]))
    prompt = "List the files here [[fault:tool=Bash,tool_arg=ls]]"
    result, err = await run_claude_code(gw.url, name, prompt, tmp_path)
    assert result["is_error"] is False and result["num_turns"] == 2, (result, err.decode()[-3000:])
    first, second = (r for r in server.requests if r.path == "/v1/messages")
    assert first.headers["x-api-key"] == "upstream-key"  # the gateway's key, never Claude Code's
    assert "claude-code-20250219" in first.headers["anthropic-beta"]  # passed through to Anthropic
    if name == "team-coder":  # what the name made Claude Code send reached the target as it came
        betas = first.headers["anthropic-beta"].split(",")
        assert any(b.startswith("mid-conversation-") for b in betas), betas  # its name changes by version
        assert [m["role"] for m in first.body["messages"]] == ["user", "system"], first.body["messages"]
    results = [b for b in second.body["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert results and "hello.txt" in json.dumps(results[0]["content"])


@pytest.mark.skipif(not BINARY.exists(), reason=f"Claude Code is not installed at {BINARY}")
async def test_claude_code_completes_a_one_tool_task_on_the_mock(gateway: GatewayFactory, tmp_path: Path) -> None:
    """The built-in ``mock`` (the quick start's ``demo``) as Claude Code finds it: every beta, adaptive
    thinking, effort, thinking clearing that keeps all, 25 tools; the prompt's marker makes the mock
    call Bash with ``ls``, and it answers the result in text."""
    gw = await gateway(
        config([{"name": "demo", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]}])
    )
    prompt = 'List the files here [mock-tool Bash {"command": "ls"}]'
    result, err = await run_claude_code(gw.url, "demo", prompt, tmp_path)
    assert result["is_error"] is False and result["num_turns"] == 2, (result, err.decode()[-3000:])
    assert result["usage"]["output_tokens"] > 0


# OpenAI-shaped targets: (provider, upstream model, extra target keys). The fake's OpenAI wire judges a
# chat by its model as OpenAI's API does: o3 refuses ``max_tokens``, gpt-4o ``reasoning_effort``.
REASONER = {"extra_features": ["thinking", "effort"]}
OPENAI_SHAPED = [
    ("openai", "gpt-4o", {}),
    ("openai", "o3", REASONER),
    ("friendli", "up-model", {}),
    ("sgp", "up-model", {}),
    ("sgp-v4", "up-model", {}),
    ("octoai", "up-model", {}),
]
ADVICE = ("thinking", "output_config", "reasoning_effort", "thinking_token_budget")


@pytest.mark.skipif(not BINARY.exists(), reason=f"Claude Code is not installed at {BINARY}")
@pytest.mark.parametrize("name", ["claude-sonnet-4-5", "team-coder"])
@pytest.mark.parametrize(("kind", "model", "extra"), OPENAI_SHAPED, ids=[f"{k}-{m}" for k, m, _ in OPENAI_SHAPED])
async def test_claude_code_completes_a_one_tool_task_on_openai_shaped_targets(
    gateway: GatewayFactory, upstream: Any, tmp_path: Path, kind: str, model: str, extra: dict[str, Any], name: str
) -> None:
    """Claude Code as it comes (enabled thinking with a budget under a Claude model's name; adaptive
    thinking and an effort under any other) on a target with no reasoning control: served without
    them; on an ``openai`` reasoning model: as ``reasoning_effort`` (both ask for ``high``)."""
    server = await upstream(kind)
    gw = await gateway(config([{"name": name, "targets": [target(server, kind, model=model, **extra)]}]))
    prompt = "List the files here [[fault:tool=Bash,tool_arg=ls]]"
    result, err = await run_claude_code(gw.url, name, prompt, tmp_path)
    assert result["is_error"] is False and result["num_turns"] == 2, (result, err.decode()[-3000:])
    first, second = (r.body for r in server.requests)
    assert first["tools"] and first["stream"] is True
    if extra:
        assert first["reasoning_effort"] == "high" and "max_tokens" not in first, first.keys()
    else:
        assert not set(ADVICE) & first.keys(), first.keys()
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert results and "hello.txt" in json.dumps(results[-1]["content"]), second["messages"][-2:]


async def run_claude_code(url: str, name: str, prompt: str, tmp_path: Path) -> tuple[dict[str, Any], bytes]:
    """``claude -p PROMPT`` in a directory holding hello.txt, Bash allowed, against the gateway at
    ``url`` under model ``name``: its JSON result and its stderr."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "hello.txt").write_text("hello\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url.rstrip("/"),
        "ANTHROPIC_AUTH_TOKEN": KEY,
        "ANTHROPIC_MODEL": name,
        "ANTHROPIC_SMALL_FAST_MODEL": name,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    argv = [str(BINARY), "-p", prompt, "--allowedTools", "Bash", "--output-format", "json"]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=work, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
    return json.loads(out.decode().strip().splitlines()[-1]), err
