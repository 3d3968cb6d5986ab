"""The shipped dashboard and alert rules use only metrics the gateway exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import gateway.obs.metrics  # noqa: F401  (declares the metrics)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAME = re.compile(r"\b(gateway_[a-z_]+)")


def exported() -> set[str]:
    names = set()
    for family in REGISTRY.collect():
        names.update(s.name for s in family.samples)
        if family.type == "histogram":
            names.update({family.name + "_bucket", family.name + "_count", family.name + "_sum"})
        if family.type == "counter":
            names.add(family.name + "_total")
        names.add(family.name)
    return {n for n in names if n.startswith("gateway_")}


def test_dashboard_metrics_exist() -> None:
    dash = json.loads((DEPLOY / "grafana" / "llm-gateway.json").read_text())
    used = {m for p in dash["panels"] for t in p["targets"] for m in NAME.findall(t["expr"])}
    assert used and used <= exported(), used - exported()


def test_alert_rules_parse_and_use_existing_metrics() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"GatewayHighErrorRate", "GatewayOverheadP99High", "GatewayRedisDown", "GatewayModelAllTargetsDown"} <= names
    used = {m for e in exprs for m in NAME.findall(e)}
    assert used <= exported(), used - exported()


def test_example_config_is_valid() -> None:
    from gateway.runtime.config import load_config

    config = load_config(DEPLOY / "gateway.example.yaml")
    assert config.redis is not None and config.models[0].name == "llama-8b"


def test_promtool_accepts_config_and_rules() -> None:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is required; scripts/test installs it"
    for args in (["check", "rules", "alerts.yml"], ["check", "config", "prometheus.yml"]):
        out = subprocess.run([promtool, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
