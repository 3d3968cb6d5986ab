"""The real vLLM engine (CPU build, tiny random Llama) on 127.0.0.1, once per session, with this
project's logits-processor plugins loaded through their entry point."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.redis_servers import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class VLLM:
    base: str  # http://127.0.0.1:PORT
    url: str  # base + /v1, what an OpenAI-compatible target points at
    model_dir: Path


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    if os.environ.get("GATEWAY_SKIP_VLLM") == "1":
        pytest.skip("GATEWAY_SKIP_VLLM=1: the real-vLLM tier was asked to be skipped")
    subprocess.run([str(ROOT / "scripts" / "vllm-env")], check=True, cwd=ROOT)
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_USE_V2_MODEL_RUNNER": "0",
    }
    args = [str(ROOT / ".vllm-venv" / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    args += ["--model", str(ROOT / ".vllm-model"), "--served-model-name", "tiny", "--host", "127.0.0.1"]
    args += ["--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "4"]
    args += ["--enforce-eager"]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"vLLM not ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield VLLM(base, base + "/v1", ROOT / ".vllm-model")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
