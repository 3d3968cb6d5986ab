"""What ``deploy/`` ships besides the chart (``test_helm.py``): the dashboard and alert rules use only
metrics the gateway exports and page only where they mean something; the compose stack and its example
config are ones the gateway and vLLM can run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
    used = {m for p in dash["panels"] for t in p.get("targets", []) for m in NAME.findall(t["expr"])}
    assert "Spend" in {p["title"] for p in dash["panels"] if p["type"] == "row"}
    assert used and used <= exported(), used - exported()


def alerts(file: str) -> dict[str, str]:
    """Alert name -> expression, of one rules file in deploy/prometheus."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / file).read_text())
    return {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}


def test_alert_rules_parse_and_use_existing_metrics() -> None:
    rules = alerts("alerts.yml") | alerts("alerts-redis.yml")
    assert {"GatewayHighErrorRate", "GatewayOverheadP99High", "GatewayRedisDown", "GatewayModelAllTargetsDown"} <= set(
        rules
    )
    assert "gateway_budget_utilisation) >= 0.8" in rules["GatewayBudget80Percent"]
    assert "gateway_budget_utilisation) >= 1" in rules["GatewayBudgetExhausted"]
    used = {m for e in rules.values() for m in NAME.findall(e)}
    assert used <= exported(), used - exported()


def test_redis_alerts_are_loaded_only_where_redis_is_configured() -> None:
    """Without a redis section gateway_redis_up stays 0 (nothing ever sets it), so GatewayRedisDown would
    page for ever: it lives in a file of its own, and the scrape config loads it beside a config with Redis."""
    assert not any("redis" in expr for expr in alerts("alerts.yml").values())
    assert set(alerts("alerts-redis.yml")) == {"GatewayRedisDown"}
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["alerts.yml", "alerts-redis.yml"]
    assert yaml.safe_load((DEPLOY / "gateway.example.yaml").read_text())["redis"]  # what it scrapes has Redis


def test_example_config_is_valid() -> None:
    from gateway.runtime.config_file import load_config
    from gateway.web.app import check_target

    config = load_config(DEPLOY / "gateway.example.yaml")
    assert config.redis is not None and config.models[0].name == "llama-8b"
    for model in config.models:
        for target in model.targets:
            check_target(target)  # a provider the gateway has, configured its way
    # one model answers on any machine (deploy/COMPOSE.md's first request), without a GPU or a key
    demo = next(m for m in config.models if m.name == "demo")
    assert [t.provider for t in demo.targets] == ["mock"]


def test_compose_gives_vllm_its_token_and_a_model_cache() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    vllm = compose["services"]["vllm"]
    assert vllm["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"  # gated models; optional for open ones
    (cache,) = (v for v in vllm["volumes"] if v.endswith(":/root/.cache/huggingface"))
    assert cache.partition(":")[0] in compose["volumes"]  # a named volume: the weights outlive the container
    assert "--served-model-name" in vllm["command"] and "llama-8b" in vllm["command"]


def test_compose_stops_the_gateway_after_its_drain() -> None:
    gateway = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["gateway"]
    drain = re.fullmatch(r"\$\{LLM_GATEWAY_DRAIN_SECONDS:-(\d+)\}", gateway["environment"]["LLM_GATEWAY_DRAIN_SECONDS"])
    assert drain, "the drain is set, with a default"
    grace = re.fullmatch(r"(\d+)s", gateway["stop_grace_period"])
    assert grace and int(grace[1]) > int(drain[1])  # SIGKILL only after the drain


async def test_the_compose_walkthrough_ends_in_an_answer() -> None:
    """COMPOSE.md's request, as written, to the example config's ``demo`` model and ``default`` team,
    on a real socket. Only what needs the compose network is left out: Redis (keys issued through the
    admin API; here one key of the team is in the config), vLLM and the OpenAI vendor."""
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from gateway.runtime.config import hash_key, parse_config
    from gateway.web.app import create_app

    text = (DEPLOY / "COMPOSE.md").read_text()
    assert "docker compose up" in text and "keys create --team default" in text
    (body,) = re.findall(r"-d '(\{.*\})'", text)
    raw = yaml.safe_load((DEPLOY / "gateway.example.yaml").read_text())
    del raw["redis"]
    raw.pop("vendors", None)
    raw["models"] = [m for m in raw["models"] if m["name"] == json.loads(body)["model"]]
    (team,) = (t for t in raw["teams"] if t["id"] == "default")
    team["keys"] = [{"id": "walkthrough", "sha256": hash_key("sk-walkthrough")}]
    server = TestServer(create_app(parse_config(raw)))
    await server.start_server()
    try:
        async with ClientSession() as client:
            url = str(server.make_url("/v1/chat/completions"))
            headers = {"Authorization": "Bearer sk-walkthrough", "Content-Type": "application/json"}
            async with client.post(url, data=body, headers=headers) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
    finally:
        await server.close()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0


def test_promtool_accepts_config_and_rules() -> None:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is required; scripts/test installs it"
    for args in (["check", "rules", "alerts.yml", "alerts-redis.yml"], ["check", "config", "prometheus.yml"]):
        out = subprocess.run([promtool, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_panels_have_their_own_ids_and_places() -> None:
    dash = json.loads((DEPLOY / "grafana" / "llm-gateway.json").read_text())
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = [
        (x, y)
        for p in panels
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(set(cells)) == len(cells), "two panels overlap"
    assert "Replica routing" in {p["title"] for p in panels if p["type"] == "row"}
    used = {m for p in panels for t in p.get("targets", []) for m in NAME.findall(t["expr"])}
    feed = {"gateway_kv_events_total", "gateway_kv_events_gaps_total", "gateway_kv_events_connected"}
    assert {"gateway_routing_decisions_total", "gateway_shared_prefix_fallbacks_total", *feed} <= used


def summary(alert: str, **labels: str) -> str:
    """An alert's summary as Prometheus expands it for ``labels``."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    (text,) = (r["annotations"]["summary"] for g in rules["groups"] for r in g["rules"] if r["alert"] == alert)
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)


def fired(alert: str, **labels: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": "ticket", **labels}, "exp_annotations": {"summary": summary(alert, **labels)}}


def test_promtool_fires_the_routing_alerts_where_they_mean_something(tmp_path: Path) -> None:
    """Series as a gateway exports them, minute by minute: the feed alert fires for a replica that
    serves while its events are lost or silent, not for a fresh feed or an idle replica; the
    fallback alert for a sustained rate only."""
    import shutil
    import subprocess

    def replica(name: str, connected: str, last_batch: str, running: str) -> list[dict[str, str]]:
        labels = f'{{target="pool",replica="{name}"}}'
        return [
            {"series": f"gateway_kv_events_connected{labels}", "values": connected},
            {"series": f"gateway_kv_events_last_batch_timestamp_seconds{labels}", "values": last_batch},
            {"series": f"gateway_replica_engine_requests{labels}", "values": running},
            {"series": f"gateway_replica_up{labels}", "values": "1x40"},
        ]

    feed = "GatewayKvEventsFeedSilent"
    fallbacks = "GatewaySharedPrefixIndexFallingBack"
    tests = {
        "rule_files": [str(DEPLOY / "prometheus" / "alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    *replica("silent", "1x40", "60x40", "3x40"),  # its last batch at the first minute
                    *replica("lost", "0x40", "60x40", "3x40"),
                    *replica("fresh", "1x40", "0+60x40", "3x40"),  # a batch every minute
                    *replica("idle", "0x40", "60x40", "0x40"),
                    {"series": 'gateway_shared_prefix_fallbacks_total{target="a",cause="error"}', "values": "0+12x40"},
                    {"series": 'gateway_shared_prefix_fallbacks_total{target="b",cause="timeout"}', "values": "0+1x40"},
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": feed, "exp_alerts": []},  # pending: not for 10 minutes yet
                    {
                        "eval_time": "25m",
                        "alertname": feed,
                        "exp_alerts": [fired(feed, target="pool", replica=r) for r in ("silent", "lost")],
                    },
                    {
                        "eval_time": "25m",
                        "alertname": fallbacks,
                        "exp_alerts": [fired(fallbacks, target="a", cause="error")],
                    },
                ],
            }
        ],
    }
    (tmp_path / "routing_test.yml").write_text(yaml.safe_dump(tests))
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is required; scripts/test installs it"
    out = subprocess.run([promtool, "test", "rules", "routing_test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def dockerfile_extras() -> list[set[str]]:
    """The extras each pip step of the Dockerfile names for the gateway (``.[a,b]``, ``llm-gateway[a,b]``)."""
    steps = re.findall(r"^RUN pip (?:wheel|install) .*$", (DEPLOY / "Dockerfile").read_text(), re.M)
    return [set(re.search(r"(?:\.|llm-gateway)\[([a-z,-]+)\]", s)[1].split(",")) for s in steps]  # type: ignore[index]


def test_the_image_carries_the_extras_configs_need() -> None:
    """A config with ``tracing`` or a pool's ``balance.kv_events`` starts in the image: both stages
    name both extras (the install from the built wheels only, so none is left out), and each module
    ``check-config`` asks for is provided by a package those extras require."""
    import importlib.metadata
    import tomllib

    from gateway.cli import KV_EVENTS_MODULES, TRACING_MODULES

    build, install = dockerfile_extras()
    assert build == install == {"tracing", "kv-events"}
    assert "--no-index --find-links /wheels" in (DEPLOY / "Dockerfile").read_text()
    extras = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dists = importlib.metadata.packages_distributions()
    for extra, modules in (("tracing", TRACING_MODULES), ("kv-events", KV_EVENTS_MODULES)):
        required = {re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras[extra]}
        for module in modules:
            top = module.split(".")[0]
            provided = {d.lower() for d in dists.get(top, [])}
            assert provided & required, f"{module} ({provided}) is in no package of the {extra} extra ({required})"


def test_compose_keeps_redis_on_a_volume_append_only() -> None:
    """Issued keys and spend live only in Redis (docs/deployment.md#what-lives-in-redis)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    (data,) = compose["services"]["redis"]["volumes"]
    assert data.endswith(":/data") and data.partition(":")[0] in compose["volumes"]  # a named volume
