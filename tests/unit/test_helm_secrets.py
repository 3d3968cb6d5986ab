"""The Helm chart's credentials: API keys the config names, upstream key files, and the metrics
token, from the chart's own Secret or one of yours by reference, never in the rendered config."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.runtime.config import parse_config
from tests.unit.helm_chart import (
    CHART,
    GENERATED_ADMIN,
    KEYED,
    KEYED_TEAMS,
    METRICS_VAR,
    MONITORING,
    SECRET_REFS,
    VALUE_SETS,
    flags,
    gateway_config,
    helm,
    key_refs,
    needed_from_outside,
    render,
)


def test_only_the_keys_the_config_names_are_required() -> None:
    # the default config names no key; the admin key is optional, generated when none is given
    assert key_refs(render()) == GENERATED_ADMIN
    assert key_refs(render("secrets.generateAdminKey=false", "config.auth=none")) == {}
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
    assert key_refs(m) == {var: {"name": name, "key": var} for var in secret["stringData"]} | GENERATED_ADMIN
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
    assert key_refs(m) == {METRICS_VAR: ref} | GENERATED_ADMIN  # not optional: the pod never starts open by mistake
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
    assert key_refs(keyed) == {METRICS_VAR: {"name": "gw-keys", "key": "metrics"}} | GENERATED_ADMIN
    assert scrape_auth(keyed)["credentials"] == {"name": "gw-keys", "key": "metrics"}


def test_the_metrics_token_goes_in_the_variable_the_config_names() -> None:
    m = render("metrics.token=m1", "config.server.metrics_token_env=OPS_METRICS_TOKEN", apis=MONITORING)
    assert parse_config(gateway_config(m)).server.metrics_token_env == "OPS_METRICS_TOKEN"
    assert set(key_refs(m)) == {"OPS_METRICS_TOKEN", *GENERATED_ADMIN}
    assert m["Secret"]["stringData"] == {"OPS_METRICS_TOKEN": "m1"}
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
