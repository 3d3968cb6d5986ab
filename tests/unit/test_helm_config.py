"""The chart refuses, at render time and in ``check-config``'s own words, every config the gateway's
loader refuses by a rule it holds in code. The rule set is read off the loader itself: every
``raise`` (and ``price_problem``'s every answer) in the validators, the name and price cross-checks
and ``check_target``. Each refused config below is run through ``llm-gateway check-config`` under a
tracer, which must reach every one of those sites; and through ``helm template``, whose error must
carry check-config's line, "config" in place of the file's name. A rule added to the loader without
its twin in ``templates/_config_check.tpl`` fails here twice: no case reaches it, then Helm renders
the case.

Shapes, types and bounds are pydantic's, and ``values.schema.json`` (generated from it) refuses them
before any template runs, naming the field (``test_helm.py``). What the loader checks against the
world, not the file, is out of the chart's reach and listed in ``NOT_AT_RENDER``."""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.routing import capabilities
from gateway.runtime import config, spend_config
from gateway.web import app
from tests.unit.helm_chart import CHART, helm

SHA = "a" * 64
MOCK = {"name": "m", "targets": [{"provider": "mock"}]}
BASE: dict[str, Any] = {"auth": "none", "teams": [], "models": [MOCK]}  # check-config and Helm both take it


def vllm(**target: Any) -> dict[str, Any]:
    """A config whose one model runs on one vllm target with these fields."""
    return {"models": [{"name": "m", "targets": [{"provider": "vllm", **target}]}]}


def price(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": 1, "output": 2, **fields}


EVENTS = {"port": 5557, "tokenizer": "/models/llama"}
POOL = {"replicas": ["http://a:8000/v1"]}
REFUSED: dict[str, dict[str, Any]] = {  # one mistake each, over BASE
    "base-url-scheme": vllm(base_url="vllm:8000/v1"),
    "replica-scheme": vllm(replicas=["vllm:8000/v1"]),
    "replica-twice": vllm(replicas=["http://a:8000/v1/", "http://a:8000/v1"]),
    "events-no-source": vllm(**POOL, balance={"kv_events": {"tokenizer": "/t"}}),
    "events-replay-twice": vllm(
        **POOL, balance={"kv_events": {**EVENTS, "replay_endpoints": ["tcp://a:1"], "replay_port": 2}}
    ),
    "events-scheme": vllm(**POOL, balance={"kv_events": {"endpoints": ["a:5557"], "tokenizer": "/t"}}),
    "events-strategy": vllm(**POOL, balance={"strategy": "round-robin", "kv_events": EVENTS}),
    "two-places": vllm(base_url="http://a:8000/v1", replicas=["http://b:8000/v1"]),
    "events-no-pool": vllm(base_url="http://a:8000/v1", balance={"kv_events": EVENTS}),
    "events-per-replica": vllm(
        replicas=["http://a:8000/v1", "http://b:8000/v1"],
        balance={"kv_events": {"endpoints": ["tcp://a:5557"], "tokenizer": "/t"}},
    ),
    "key-env-and-file": vllm(base_url="http://a:8000/v1", api_key_env="K", api_key_file="/k"),
    "named-target": vllm(name="primary", base_url="a:8000"),  # a named item is placed by its name
    "key-no-source": {"teams": [{"id": "t", "keys": [{"id": "k"}]}]},
    "key-not-hex": {"teams": [{"id": "t", "keys": [{"id": "k", "sha256": "A" * 64}]}]},
    "budget-empty": {"teams": [{"id": "t", "budget": {}}]},
    "budget-decimals": {"teams": [{"id": "t", "key_budget": {"amount": 0.0000015}}]},
    "budget-small-decimals": {"teams": [{"id": "t", "budget": {"amount": 1e-7}}]},
    "budget-window": {"teams": [{"id": "t", "budget": {"tokens": 1000, "period": "rolling"}}]},
    "price-read-twice": {"spend": {"prices": [price(cache_read=1, cached_input=1)]}},
    "price-twice": {"spend": {"prices": [price(), price(input=3)]}},
    "tracing-endpoint": {"tracing": {"endpoint": "collector:4318"}},
    "model-twice": {"models": [MOCK, MOCK]},
    "alias-is-name": {"models": [{**MOCK, "aliases": ["m"]}]},
    "team-twice": {"teams": [{"id": "o'brien"}, {"id": "o'brien"}]},  # quoted as Python quotes it
    "class-twice": {"priorities": ["batch", "batch"]},
    "class-not-token": {"priorities": ["high priority"]},
    "team-class": {"teams": [{"id": "t", "priority": "vip"}]},
    "key-class": {"teams": [{"id": "t", "keys": [{"id": "k", "sha256": SHA, "priority": "vip"}]}]},
    "team-model": {"teams": [{"id": "t", "models": ["m", "openai/gpt"]}]},
    "price-alias": {"models": [{**MOCK, "aliases": ["a"]}], "spend": {"prices": [price(model="a")]}},
    "price-target": {"spend": {"prices": [price(target="vllm:m")]}},
    "price-model": {
        "vendors": {"openai": {"provider": "openai", "base_url": "https://o"}},
        "spend": {"prices": [price(model="gpt")]},
    },
    "in-process-url": {"models": [{"name": "m", "targets": [{"provider": "mock", "base_url": "http://a"}]}]},
    "unknown-provider": vllm(provider="vlm", base_url="http://a:8000/v1"),
    "engine-over-http": vllm(engine={"model": "x"}),
    "http-no-address": vllm(),
    "extra-feature": vllm(base_url="http://a:8000/v1", extra_features=["xtc", "xtcc"]),
    "no-teams": {"auth": "keys"},
    "no-key-no-admin": {"auth": "keys", "teams": [{"id": "t"}]},
}
# The chart's values beside the config, where a case needs them: no admin key generated here.
CHART_VALUES: dict[str, dict[str, Any]] = {"no-key-no-admin": {"secrets": {"generateAdminKey": False}}}

# What the loader checks that a render cannot know: the world the pod starts in, not the file.
NOT_AT_RENDER = {
    "SpendSettings._zone": "the time zone database of the pod's image decides which names exist",
    "RedisConfig._scheme": "the chart writes config.redis itself (values.schema.json refuses yours)",
}


# Where the loader's rules live, and the functions there that hold them (None: every one).
SCOPES: dict[ModuleType, set[str] | None] = {
    config: None,
    spend_config: None,
    app: {"check_target"},
    capabilities: {"check_extra_features"},
}
# The loader's functions that read the file or the environment rather than the config's values:
# Helm writes the file itself (a mapping, never empty), and the keys are the chart's Secrets.
OUTSIDE_THE_FILE = {"read_yaml", "parse_config", "load_config", "check_environment", "key_hashes"}


def refusal_sites() -> set[tuple[str, int]]:
    """(file, line) of every refusal the loader holds in code: each ``raise`` in its rules, and each
    answer of ``price_problem``."""
    sites: set[tuple[str, int]] = set()
    for module, names in SCOPES.items():
        file = inspect.getsourcefile(module)
        assert file is not None
        for where, node in walk(ast.parse(Path(file).read_text())):
            if (names is not None and where not in names) or where in OUTSIDE_THE_FILE | set(NOT_AT_RENDER):
                continue
            answer = where == "price_problem" and isinstance(node, ast.Return) and isinstance(node.value, ast.JoinedStr)
            if isinstance(node, ast.Raise) or answer:
                sites.add((file, node.lineno))
    return sites


def walk(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Every node with the name of the function around it (``Class.method``, or a function's name)."""

    def visit(node: ast.AST, where: str, cls: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, where, child.name)
            elif isinstance(child, ast.FunctionDef):
                yield from visit(child, f"{cls}.{child.name}" if cls else child.name, "")
            else:
                yield child, where
                yield from visit(child, where, cls)

    for node, where in visit(tree, "", ""):
        yield where, node


def check_config(cfg: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """check-config's refusal, after the file's name; "" when it takes the config."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = main(["check-config", str(path)])
    err = capsys.readouterr().err.strip()
    assert code in (0, 2), err
    return err.removeprefix(f"{path}: ") if code else ""


@pytest.fixture(autouse=True)
def no_admin_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """check-config sees no admin key, as a pod whose release gives none."""
    monkeypatch.delenv("LLM_GATEWAY_ADMIN_KEY", raising=False)


def helm_refusal(cfg: dict[str, Any], tmp_path: Path, chart: dict[str, Any] | None = None) -> str:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": cfg, **(chart or {})}))
    out = helm("template", "gw", str(CHART), "-f", str(values))
    return out.stderr if out.returncode else ""


def test_the_base_config_passes_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """So that each case below is refused for its one mistake."""
    assert check_config(BASE, tmp_path, capsys) == ""
    assert helm_refusal(BASE, tmp_path) == ""


def test_a_release_that_gives_an_admin_key_may_start_with_no_team_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart generates one by default (or takes yours); check-config, given one, agrees."""
    cfg = BASE | REFUSED["no-key-no-admin"]
    assert helm_refusal(cfg, tmp_path) == ""
    assert (
        helm_refusal(cfg, tmp_path, {"secrets": {"generateAdminKey": False, "values": {"LLM_GATEWAY_ADMIN_KEY": "a"}}})
        == ""
    )
    monkeypatch.setenv("LLM_GATEWAY_ADMIN_KEY", "a")
    assert check_config(cfg, tmp_path, capsys) == ""


@pytest.mark.parametrize("case", REFUSED)
def test_helm_refuses_with_check_configs_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = BASE | REFUSED[case]
    line = check_config(cfg, tmp_path, capsys)
    assert line, "check-config takes it: not a refused config"
    out = helm_refusal(cfg, tmp_path, CHART_VALUES.get(case))
    assert f"config: {line}\n" in out, f"check-config: {line}\nhelm: {out}"


def test_the_cases_reach_every_refusal_the_loader_holds_in_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites = refusal_sites()
    files = {file for file, _ in sites}
    reached: set[tuple[str, int]] = set()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename not in files:
            return None
        reached.add((frame.f_code.co_filename, frame.f_lineno))
        return tracer

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        for mistake in REFUSED.values():
            check_config(BASE | mistake, tmp_path, capsys)
    finally:
        sys.settrace(before)
    missed = sorted(sites - reached)
    assert not missed, f"refusals no case reaches (add one to REFUSED, and its rule to _config_check.tpl): {missed}"
