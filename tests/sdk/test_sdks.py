"""Each vendor's own Python SDK, unchanged but for its base URL, against a running gateway.

Every (SDK[, flavour], case) cell runs ``tests/sdk/drivers/drive_<sdk>.py`` with that SDK's venv
python (``.sdk-venvs/<sdk>``) in a throwaway HOME, and checks the one JSON line it prints:

* ``complete``, ``stream``, ``chat``, ``chat_stream`` succeed with non-empty text and a finish reason
  of ``stop`` or ``length``; the streamed text equals the non-streamed text for the same SDK;
* ``bad_key`` surfaces 401, ``wrong_team`` (the right key, a team it is not in) 403, and
  ``malformed`` (a wrong-typed field on the wire) a 4xx;
* ``stream_break`` and ``chat_stream_break`` (the upstream fails after two tokens) raise in the SDK:
  none ends a broken stream as if it were complete.

Cells an SDK cannot express are listed in ``NOT_APPLICABLE`` with the reason; the test checks that the
driver agrees (it answers "unsupported") and then reports the cell as skipped with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.conftest import KEY, MODEL, OTHER_TEAM, ROOT, TEAM, Gateway

pytestmark = pytest.mark.sdk

DRIVER_TIMEOUT = 60.0
SUCCESS = ("complete", "stream", "chat", "chat_stream")
ERRORS = ("bad_key", "wrong_team", "malformed")
BREAKS = ("stream_break", "chat_stream_break")
CASES = SUCCESS + ERRORS + BREAKS
FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class Target:
    """One SDK (its venv name) and, for friendli, the API flavour its driver calls. Tables key on ``id``."""

    sdk: str
    flavour: str | None = None

    @property
    def id(self) -> str:
        return f"{self.sdk}-{self.flavour}" if self.flavour else self.sdk

    @property
    def driver(self) -> Path:
        # both Scale SDKs share one driver: they differ only in where the resources hang
        name = "scale-gp" if self.sdk.startswith("scale-gp") else self.sdk
        return ROOT / "tests" / "sdk" / "drivers" / f"drive_{name.replace('-', '_')}.py"


TARGETS = (
    Target("openai"),
    Target("friendli", "serverless"),
    Target("friendli", "dedicated"),
    Target("friendli", "container"),
    Target("friendli-client"),
    Target("scale-gp"),
    Target("scale-gp-beta"),
    Target("octoai"),
    Target("octoai-sdk"),
)

NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("octoai", "wrong_team"): "OctoAI's API and SDK have no team, account or organization header",
    ("octoai-sdk", "wrong_team"): "OctoAI's API and SDK have no team, account or organization header",
    ("friendli-container", "wrong_team"): "friendli's container operations take no x_friendli_team",
}

# friendli-client's ``Completion`` model has no finish_reason field (pydantic drops the key), and its
# completion stream yields token lines and stops at the final object without returning it.
FINISH_REASON_NOT_EXPOSED: dict[tuple[str, str], str] = {
    ("friendli-client", "complete"): "friendli-client's Completion has no finish_reason",
    ("friendli-client", "stream"): "friendli-client's completion stream does not return its final object",
}

EXPECTED_STATUS = {"bad_key": (401, 401), "wrong_team": (403, 403), "malformed": (400, 499)}
CELLS = [(t, case) for t in TARGETS for case in CASES]


@dataclass(frozen=True)
class Run:
    """One driver run: its parsed JSON line and everything needed to explain a failure."""

    result: dict[str, Any]
    context: str

    def __getitem__(self, key: str) -> Any:
        return self.result[key]


_cache: dict[tuple[Target, str], Run] = {}


def drive(gateway: Gateway, target: Target, case: str, home: Path) -> Run:
    """Runs one driver (once per session; the stream comparisons reuse the cells' runs)."""
    cached = _cache.get((target, case))
    if cached is not None:
        return cached
    python = ROOT / ".sdk-venvs" / target.sdk / "bin" / "python"
    team = OTHER_TEAM if case == "wrong_team" else TEAM
    argv = [str(python), str(target.driver), "--base-url", gateway.url, "--key", KEY, "--model", MODEL]
    argv += ["--team", team, "--case", case]
    if target.flavour:
        argv += ["--flavour", target.flavour]
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),  # friendli-client writes ~/.friendli on import
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    offset = gateway.log_size()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=DRIVER_TIMEOUT, env=env, cwd=home)
        stdout, stderr, how = proc.stdout, proc.stderr, f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        how = f"killed after {DRIVER_TIMEOUT:.0f} s"
    context = (
        f"\n$ {' '.join(argv)}\n({how})\n--- driver stdout:\n{stdout}\n--- driver stderr:\n{stderr[-6000:]}"
        f"\n--- gateway output during the run:\n{gateway.log_since(offset)}"
    )
    lines = stdout.splitlines()
    if len(lines) != 1:
        pytest.fail(f"the driver must print exactly one JSON line, printed {len(lines)}{context}")
    try:
        result = json.loads(lines[0])
    except ValueError:
        pytest.fail(f"the driver's line is not JSON{context}")
    assert isinstance(result, dict) and "ok" in result, f"unexpected driver output{context}"
    run = Run(result, context)
    _cache[(target, case)] = run
    return run


@pytest.mark.parametrize(("target", "case"), CELLS, ids=[f"{t.id}-{c}" for t, c in CELLS])
def test_sdk_case(gateway: Gateway, target: Target, case: str, tmp_path: Path) -> None:
    run = drive(gateway, target, case, tmp_path)
    not_applicable = NOT_APPLICABLE.get((target.id, case))
    if not_applicable:
        assert run["error"] == "unsupported", f"listed as not applicable, yet the driver ran it{run.context}"
        pytest.skip(f"not applicable: {not_applicable}")
    assert run["error"] != "unsupported", f"the driver cannot run this case; list it in NOT_APPLICABLE{run.context}"

    if case in SUCCESS:
        assert run["ok"] is True, f"the SDK call failed{run.context}"
        assert isinstance(run["text"], str) and run["text"], f"no text{run.context}"
        if (target.id, case) in FINISH_REASON_NOT_EXPOSED:
            assert run["finish_reason"] is None, f"the SDK exposes finish_reason now; update the table{run.context}"
        else:
            assert run["finish_reason"] in FINISH_REASONS, f"finish_reason {run['finish_reason']!r}{run.context}"
        if case.endswith("stream"):
            assert isinstance(run["chunks"], int) and run["chunks"] >= 1, f"no chunks{run.context}"
    elif case in BREAKS:
        assert run["ok"] is False, f"the SDK ended a broken stream as if complete: {run['text']!r}{run.context}"
    else:
        low, high = EXPECTED_STATUS[case]
        assert run["ok"] is False, f"{case}: the gateway accepted the request{run.context}"
        status = run["status"]
        assert isinstance(status, int) and low <= status <= high, (
            f"{case}: expected HTTP {low if low == high else f'{low}..{high}'}, the SDK surfaced {status!r}"
            f"{run.context}"
        )


@pytest.mark.parametrize(("whole", "streamed"), [("complete", "stream"), ("chat", "chat_stream")])
@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_stream_matches_whole_answer(
    gateway: Gateway, target: Target, whole: str, streamed: str, tmp_path: Path
) -> None:
    """The same prompt gives the same text (and finish reason) streamed or not, as the SDK sees it."""
    a = drive(gateway, target, whole, tmp_path / whole)
    b = drive(gateway, target, streamed, tmp_path / streamed)
    assert a["ok"] and b["ok"], f"see the {whole}/{streamed} cells{a.context}{b.context}"
    assert b["text"] == a["text"], f"streamed {b['text']!r} != whole {a['text']!r}{a.context}{b.context}"
    if a["finish_reason"] is not None and b["finish_reason"] is not None:
        assert b["finish_reason"] == a["finish_reason"], f"{a.context}{b.context}"
