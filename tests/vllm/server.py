"""``vllm serve`` of the tiny model on 127.0.0.1: the launcher the vLLM test tier and the vLLM benchmark
(``benchmarks/vllm_serve.py``) share. No pytest here: failures are ``VLLMUnavailable``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_servers import free_port
from tests.support.waiting import eventually_blocking

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("GATEWAY_VLLM_VENV", ROOT / ".vllm-venv"))
MODEL = Path(os.environ.get("GATEWAY_VLLM_MODEL", ROOT / ".vllm-model"))
SERVED_NAME = "tiny"
# A hang-up test asks for an answer the engine cannot finish in the time the hang-up takes to land, even
# on a loaded machine (480 tokens, ~1 s, once did; 8000, with two CI runs side by side, did too). Within
# the tiny model's max_position_embeddings (make_tiny_llama.py), which vLLM enforces: never pass
# VLLM_ALLOW_LONG_MAX_MODEL_LEN. Past it, vLLM's CPU rotary-embedding kernel reads beyond its cos/sin
# table: garbage or a crash, and a server whose later greedy answers are token 0 (docs/vllm.md,
# "Positions past the model's table").
MAX_MODEL_LEN = 32768
READY_TIMEOUT = float(os.environ.get("GATEWAY_VLLM_READY_TIMEOUT", "180"))
ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_USE_V2_MODEL_RUNNER": "0",  # the plugins use the V1 interface (the CPU build's default anyway)
}
DEFAULT_ARGS = ("--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "4", "--enforce-eager")


class VLLMUnavailable(RuntimeError):
    """The environment could not be set up, or the server did not come up."""


@dataclass(frozen=True)
class VLLM:
    base: str  # http://127.0.0.1:PORT (/health, /metrics, /tokenize)
    url: str  # base + "/v1", what an OpenAI-compatible target points at
    model_dir: Path
    model: str  # the served model name
    log: Path  # the server's output
    pid: int = 0  # the API server's process (the engine's processes are its descendants)
    events: str = ""  # its KV-cache events publisher (``--kv-events-config``), if it was started with one
    replay: str = ""  # and that publisher's replay socket


def server_args(port: int, extra: Sequence[str] = DEFAULT_ARGS) -> list[str]:
    """The server command line. The ``vllm`` console script fails under the vllm-cpu distribution name
    (it looks up the version of "vllm"), hence ``-m vllm.entrypoints.openai.api_server``."""
    return [
        *(str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"),
        *("--model", str(MODEL), "--served-model-name", SERVED_NAME),
        *("--host", "127.0.0.1", "--port", str(port)),
        *extra,
    ]


def kv_events_args(endpoint: str, replay: str) -> tuple[str, ...]:
    """Publish KV-cache events on ``endpoint``, and replay them on ``replay``: vLLM binds the publisher
    only if it is an ``ipc://`` path or has a wildcard host (``tcp://*:PORT``), else it connects to it."""
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint, "replay_endpoint": replay}
    return ("--kv-events-config", json.dumps(config))


def ensure_env() -> None:
    """``scripts/vllm-env``: installs vllm-cpu and builds the model the first time, a no-op after."""
    setup = subprocess.run([str(ROOT / "scripts" / "vllm-env")], cwd=ROOT, capture_output=True, text=True, check=False)
    if setup.returncode != 0:
        raise VLLMUnavailable(f"scripts/vllm-env failed (exit {setup.returncode}):\n{setup.stdout}\n{setup.stderr}")


def stop(proc: subprocess.Popen[bytes]) -> None:
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


def tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no output)"


@contextlib.contextmanager
def running_vllm(
    log: Path, extra: Sequence[str] = DEFAULT_ARGS, env: Mapping[str, str] | None = None
) -> Iterator[VLLM]:
    """A ``vllm serve`` on a free port, ready (its /health answers 200) when this yields; ``env`` adds
    to its environment (``VLLM_CPU_OMP_THREADS_BIND``, say)."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            server_args(port, extra),
            cwd=ROOT,
            env={**os.environ, **ENV, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise VLLMUnavailable(f"vLLM exited with {proc.returncode} before it was ready:\n{tail(log)}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False  # connection refused while it starts

        try:
            eventually_blocking(ready, "vLLM ready (its /health answers 200)", within=READY_TIMEOUT)
        except AssertionError as exc:
            raise VLLMUnavailable(f"{exc}:\n{tail(log)}") from None
        yield VLLM(base, base + "/v1", MODEL, SERVED_NAME, log, proc.pid)
    finally:
        stop(proc)
