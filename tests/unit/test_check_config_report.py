"""``check-config`` prints the limits, budgets and prices a config resolves to: defaults filled in,
and for each target the price the spend accounting will charge (checked against the price table
itself, so the report cannot drift from what is charged)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.cli import main
from gateway.limits.prices import PriceTable
from gateway.runtime.config import parse_config
from gateway.runtime.resolved import price_lines

KEY = "{id: k, sha256: '" + "0" * 64 + "'}"
CONFIG = f"""
models:
  - name: demo
    targets: [{{provider: mock}}, {{provider: mock, name: second}}]
  - name: free
    targets: [{{provider: mock}}]
teams:
  - id: a
    keys: [{KEY}]
    limits: {{rpm: 600, tpm: 10000}}
    key_limits: {{concurrency: 4, rpm: 5, rpm_burst: 9}}
    deadline: 30
    ttft: 2
    budget: {{amount: 12.5, period: day}}
    key_budget: {{tokens: 100000, period: rolling, window_seconds: 3600, mode: soft}}
  - id: b
    models: [demo]
spend:
  currency: EUR
  prices:
    - {{model: demo, input: 0.5, output: 1.5}}
    - {{model: demo, target: second, input: 1, cached_input: 0.1, output: 2}}
"""


def test_check_config_prints_each_teams_limits_and_budgets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(CONFIG)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "limits and budgets (kept in this process; budgets in EUR, UTC):" in out
    assert "  team a: models all; deadline 30 s; ttft ceiling 2 s\n" in out
    assert "    limits: team rpm 600 (burst 600), tpm 10000; each key rpm 5 (burst 9), concurrency 4\n" in out
    assert "    budget: team 12.5 EUR per day (hard); each key 100000 tokens rolling 3600 s (soft)\n" in out
    assert "  team b: models demo\n    limits: team none; each key none\n    budget: team none; each key none\n" in out


def test_each_targets_price_is_the_one_the_price_table_charges() -> None:
    config = parse_config(yaml.safe_load(CONFIG))
    table = PriceTable.of(config.spend)
    lines = iter(price_lines(config))
    for entry in config.models:
        for t in entry.targets:
            name = t.name or f"{t.provider}:{t.model or entry.name}"
            line = next(lines)
            assert line.startswith(f"  {entry.name} on {name}: "), line
            rate = table.rate(entry.name, name)
            if rate is None:
                assert line.endswith("unpriced (spend not counted)"), line
            else:
                assert f"input {rate.input}, cache read {rate.cached_input}," in line, line
                assert f"output {rate.output} EUR per 1M tokens" in line, line
    assert next(lines, None) is None
