"""A gateway and its upstream as subprocesses, the way a user runs them, for the vendor SDK tier."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.config import hash_key
from tests.redis_servers import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "gw-sdk-0123456789abcdef"


@dataclass
class Running:
    url: str
    gateway: subprocess.Popen[bytes]
    log: Path


def wait(url: str, proc: subprocess.Popen[bytes], limit: float = 30) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


@pytest.fixture(scope="session")
def sdk_envs() -> None:
    subprocess.run([str(ROOT / "scripts" / "sdk-envs")], check=True, cwd=ROOT)


@pytest.fixture(scope="session")
def gateway(sdk_envs: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("sdk")
    up_port, gw_port = free_port(), free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "tests.upstreams.vendors", "openai", str(up_port)], cwd=ROOT, stdout=subprocess.DEVNULL
    )
    cfg = tmp / "gateway.yaml"
    cfg.write_text(
        f"""models:
  - name: tiny
    targets:
      - {{provider: vllm, base_url: "http://127.0.0.1:{up_port}/v1", model: up-model}}
teams:
  - id: team1
    keys: [{{id: sdk, sha256: {hash_key(KEY)}}}]
  - id: team2
"""
    )
    log = tmp / "gateway.log"
    with log.open("wb") as err:
        gw = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(gw_port)],
            cwd=ROOT,
            stderr=err,
            stdout=subprocess.DEVNULL,
            env={**os.environ},
        )
    try:
        wait(f"http://127.0.0.1:{up_port}/v1/models", upstream)
        wait(f"http://127.0.0.1:{gw_port}/health", gw)
        yield Running(f"http://127.0.0.1:{gw_port}", gw, log)
    finally:
        for proc in (gw, upstream):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
