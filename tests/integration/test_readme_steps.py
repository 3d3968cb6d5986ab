"""The README's quick start says what its commands print: step 4's command, run as written on step 3's
config with the mistake the README names, prints exactly the line the README shows and exits 2."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.support.gateways import ROOT

README = (ROOT / "README.md").read_text()


def step(number: int) -> str:
    start = README.index(f"**{number}. ")
    return README[start : README.index(f"**{number + 1}. ", start)]


def fenced(text: str, lang: str) -> str:
    found = re.search(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)
    assert found, f"no ```{lang} block"
    return found.group(1)


def test_step_4_prints_the_error_the_readme_shows(tmp_path: Path) -> None:
    example = re.search(r"a target written `([^`]+)` gets\s+`([^`]+)`", step(4))
    assert example, "step 4 no longer shows a mistake and its line"
    target, shown = example.groups()
    config = fenced(step(3), "yaml")
    assert "{provider: mock}" in config
    (tmp_path / "gateway.yaml").write_text(config.replace("{provider: mock}", target, 1))
    argv = shlex.split(fenced(step(4), "bash").strip())
    argv[0] = str(ROOT / argv[0])  # .venv/bin/llm-gateway, from the repository root as the README runs it
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == shown
    assert done.stdout == ""
