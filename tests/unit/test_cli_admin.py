"""The admin CLI's own logic: which gateway it calls, and how ``teams list`` shows budgets."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.cli import parser
from gateway.cli_admin import DEFAULT_URL, admin_url, render_teams


def args(*argv: str) -> argparse.Namespace:
    return parser().parse_args(["teams", "list", *argv])


def test_the_gateway_comes_from_url_then_env_then_the_config_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_GATEWAY_URL", raising=False)
    config = tmp_path / "gateway.yaml"
    config.write_text("server: {host: 0.0.0.0, port: 9090}\nmodels: []\n")
    assert admin_url(args()) == DEFAULT_URL
    assert admin_url(args("--config", str(config))) == "http://127.0.0.1:9090"  # server.port, on loopback
    monkeypatch.setenv("LLM_GATEWAY_URL", "http://gw.internal:80")
    assert admin_url(args("--config", str(config))) == "http://gw.internal:80"
    assert admin_url(args("--url", "http://other:1")) == "http://other:1"


def test_teams_list_shows_budgets_in_the_configured_currency() -> None:
    answer = {
        "currency": "EUR",
        "teams": [
            {"id": "a", "limits": {"rpm": 5}, "budget": {"amount": "500", "period": "month", "mode": "hard"}},
            {"id": "b", "key_budget": {"tokens": 2000, "period": "rolling", "window_seconds": 3600, "mode": "soft"}},
        ],
    }
    lines = render_teams(answer).splitlines()
    assert "BUDGET" in lines[0] and "KEY BUDGET" in lines[0]
    assert "500 EUR/month hard" in lines[1] and "2000 tokens/3600s soft" in lines[2]
