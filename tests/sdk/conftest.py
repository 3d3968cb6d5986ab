"""Fixtures for the vendor SDK tier: the SDK virtual environments, and a gateway started the way a user
starts it, in front of the fake OpenAI-compatible upstream, both as subprocesses on loopback ports.

``scripts/sdk-envs`` builds (or reuses) one venv per SDK; if it fails, every SDK test fails (it is not
skipped). The gateway is ``python -m gateway serve --config <yaml>`` with one model, ``tiny``, and two
teams: ``team1`` owns the test key, ``team2`` has no keys (the ``wrong_team`` cases ask for it). The
drivers themselves are run by ``test_sdks.py``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support import eventually_blocking

ROOT = Path(__file__).resolve().parents[2]
KEY = "gw-test-0123456789abcdef"
TEAM = "team1"
OTHER_TEAM = "team2"
MODEL = "tiny"
DEAD_MODEL = "dead"
ALIAS = "meta/tiny"  # MODEL's alias: an id with a slash, as vendor-prefixed names have
CLAUDE_MODEL = "claude"  # on the fake upstream's Anthropic wire
ANTHROPIC_KEY = "sk-ant-fake-upstream-key"
ANTHROPIC_KEY_ENV = "SDK_TIER_ANTHROPIC_KEY"
START_TIMEOUT = 30.0
ENVS_TIMEOUT = 1800.0  # a cold build of all eight venvs takes a minute or two; a slow index, longer
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without proxy settings (everything here is loopback), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARS}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(path: Path, start: int = 0, limit: int = 6000) -> str:
    """The end of a log file from byte ``start`` on, at most ``limit`` characters."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read().decode(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return data if len(data) <= limit else "…" + data[-limit:]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass(frozen=True)
class Gateway:
    """A running gateway: its root URL and the file that receives its stdout and stderr."""

    url: str
    log: Path

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        return tail(self.log, offset)


@pytest.fixture(scope="session")
def sdk_envs() -> Path:
    """Runs scripts/sdk-envs (cached: seconds when nothing changed); the venvs' parent directory."""
    script = ROOT / "scripts" / "sdk-envs"
    try:
        proc = subprocess.run([str(script)], cwd=ROOT, capture_output=True, text=True, timeout=ENVS_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/sdk-envs did not finish in {ENVS_TIMEOUT:.0f} s\n{exc.stdout!r}\n{exc.stderr!r}")
    if proc.returncode != 0:
        pytest.fail(f"scripts/sdk-envs failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return ROOT / ".sdk-venvs"


def wait_ready_line(proc: subprocess.Popen[bytes], out: Path, err: Path) -> str:
    """The URL of the fake upstream's ``READY <url>`` line."""

    def ready() -> str:
        if proc.poll() is not None:
            pytest.fail(f"fake upstream exited with {proc.returncode}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}")
        lines = [line for line in out.read_text(errors="replace").splitlines() if line.startswith("READY ")]
        return lines[0].split(None, 1)[1].strip() if lines else ""

    return eventually_blocking(
        ready, f"the fake upstream's READY line (its output: {out}, {err})", within=START_TIMEOUT
    )


def wait_health(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"gateway exited with {proc.returncode} before /health answered\n{tail(log)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:  # HTTPError among them: not yet
            return False

    eventually_blocking(healthy, f"the gateway's /health 200 (its output: {log})", within=START_TIMEOUT)


def gateway_config(upstream_url: str, claude_url: str) -> str:
    """``tiny`` (alias ``meta/tiny``) on the fake upstream; ``CLAUDE_MODEL`` on the fake's Anthropic wire
    (its key from the environment, as a deployment gives it); ``DEAD_MODEL`` on a port nothing listens
    on (it cools down after three failures: the overloaded cases)."""
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    return f"""models:
  - name: {MODEL}
    aliases: [{ALIAS}]
    targets:
      - provider: openai
        base_url: {upstream_url}
        model: {MODEL}
  - name: {CLAUDE_MODEL}
    targets:
      - provider: anthropic
        base_url: {claude_url}
        model: {CLAUDE_MODEL}
        api_key_env: {ANTHROPIC_KEY_ENV}
  - name: {DEAD_MODEL}
    targets:
      - provider: openai
        base_url: http://127.0.0.1:{free_port()}/v1
        model: {DEAD_MODEL}
teams:
  - id: {TEAM}
    keys:
      - id: test-key
        sha256: {digest}
  - id: {OTHER_TEAM}
    keys: []
"""


@pytest.fixture(scope="session")
def gateway(sdk_envs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The fake upstream and a gateway in front of it, for the whole session."""
    tmp = tmp_path_factory.mktemp("sdk-gateway")
    env = clean_env(PYTHONUNBUFFERED="1", **{ANTHROPIC_KEY_ENV: ANTHROPIC_KEY})
    files: list[IO[bytes]] = []
    procs: list[subprocess.Popen[bytes]] = []

    def log_file(name: str) -> tuple[Path, IO[bytes]]:
        path = tmp / name
        f = path.open("wb")
        files.append(f)
        return path, f

    try:
        up_out, up_out_f = log_file("upstream.out")
        up_err, up_err_f = log_file("upstream.err")
        upstream = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.upstream", "--port", "0", "--model", MODEL],
            cwd=ROOT,
            stdout=up_out_f,
            stderr=up_err_f,
            env=env,
        )
        procs.append(upstream)
        upstream_url = wait_ready_line(upstream, up_out, up_err)
        claude_out, claude_out_f = log_file("anthropic.out")
        claude_err, claude_err_f = log_file("anthropic.err")
        fake_anthropic = [sys.executable, "-m", "tests.fakes.upstream", "--port", "0", "--kind", "anthropic"]
        claude = subprocess.Popen(
            [*fake_anthropic, "--model", CLAUDE_MODEL, "--api-key", ANTHROPIC_KEY],
            cwd=ROOT,
            stdout=claude_out_f,
            stderr=claude_err_f,
            env=env,
        )
        procs.append(claude)
        claude_url = wait_ready_line(claude, claude_out, claude_err)

        config = tmp / "gateway.yaml"
        config.write_text(gateway_config(upstream_url, claude_url))
        port = free_port()
        log, log_f = log_file("gateway.log")
        cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", "127.0.0.1"]
        gw = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stdout=log_f, stderr=subprocess.STDOUT, env=env)
        procs.append(gw)
        url = f"http://127.0.0.1:{port}"
        wait_health(url, gw, log)
        yield Gateway(url, log)
    finally:
        for proc in reversed(procs):
            stop(proc)
        for f in files:
            f.close()
