"""``scripts/system-tools`` (run by ``scripts/test``) says what it installs and why, and a failed
install stops it with one line saying what to do, never silently. apt-get and sudo are stand-ins
on PATH that record their arguments, so nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-tools"


def fake_path(tmp_path: Path, apt_status: int, have: tuple[str, ...] = ()) -> dict[str, str]:
    """A PATH holding bash's basics, a recording apt-get (and sudo) and only the tools in ``have``."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "env", "cat"):
        (bin_ / tool).symlink_to(subprocess.check_output(["bash", "-c", f"command -v {tool}"], text=True).strip())
    calls = tmp_path / "calls"
    scripts = {
        "apt-get": f'echo "apt-get $*" >> {calls}\nexit {apt_status}\n',
        "sudo": f'echo "sudo $*" >> {calls}\n[ "$1" = -n ] && shift\nexec "$@"\n',
        **dict.fromkeys(have, "exit 0\n"),
    }
    for name, body in scripts.items():
        (bin_ / name).write_text("#!/bin/bash\n" + body)
        (bin_ / name).chmod(0o755)
    return {"PATH": str(bin_), "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def test_it_says_what_it_installs_and_why(tmp_path: Path) -> None:
    done = run(fake_path(tmp_path, 0))
    assert done.returncode == 0, done.stderr
    assert "installing chromium prometheus with apt-get (chromium: the status page test;" in done.stderr
    assert "promtool checks deploy/ alert rules" in done.stderr
    calls = (tmp_path / "calls").read_text()
    assert "apt-get install -y -qq --no-install-recommends chromium prometheus" in calls


def test_a_failed_install_stops_with_one_line_saying_what_to_do(tmp_path: Path) -> None:
    done = run(fake_path(tmp_path, 100, have=("promtool",)))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("system-tools: could not install chromium (apt-get failed, see ")
    assert "install them yourself (apt-get install chromium) and run scripts/test again" in last


def test_nothing_is_installed_when_both_are_there(tmp_path: Path) -> None:
    done = run(fake_path(tmp_path, 100, have=("chromium", "promtool")))
    assert (done.returncode, done.stderr) == (0, "")
    assert not (tmp_path / "calls").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="as root apt-get runs without sudo")
def test_without_root_it_asks_sudo_never_for_a_password(tmp_path: Path) -> None:
    run(fake_path(tmp_path, 0))
    assert "sudo -n apt-get install" in (tmp_path / "calls").read_text()


def test_scripts_test_runs_it() -> None:
    assert "\nscripts/system-tools\n" in (ROOT / "scripts" / "test").read_text()
