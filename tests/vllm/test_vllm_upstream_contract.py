"""The in-process vLLM engine (provider ``vllm-engine``) against the one upstream contract
(``tests/support/upstream_contract.py``) that HTTP targets, replica pools and the mock keep in
``tests/integration/test_upstream_contract.py``. The engine runs in vLLM's venv, in a process of its own,
after the session's ``vllm serve`` is up (so the two engines never start at once)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.upstream_contract import CHECKS
from tests.vllm.server import ENV, ROOT, VENV, VLLM
from tests.vllm.test_vllm_engine import ENGINE

pytestmark = pytest.mark.vllm


def test_the_engine_keeps_the_upstream_contract(vllm_server: VLLM) -> None:
    args = {**ENGINE, "max_num_seqs": 2}
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "tests.support.upstream_contract", "engine", json.dumps(args)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("contract: ")), None)
    assert proc.returncode == 0 and line is not None, proc.stderr[-4000:]
    results = json.loads(line.removeprefix("contract: "))
    assert results == dict.fromkeys(CHECKS, "ok"), results
