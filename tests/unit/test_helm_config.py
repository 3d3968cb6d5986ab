"""The chart refuses, at render time and in ``check-config``'s own words, every config the gateway's
loader refuses: for its shape, and by a rule it holds in code.

Rules: the rule set is read off the loader itself: every ``raise`` (and ``price_problem``'s every
answer) in the validators, the name and price cross-checks and ``check_target``. Each refused config
below is run through ``llm-gateway check-config`` under a tracer, which must reach every one of those
sites; and through ``helm template``, whose error must carry check-config's line, "config" in place of
the file's name. A rule added to the loader without its twin in ``templates/_config_check.tpl`` fails
here twice: no case reaches it, then Helm renders the case. What the loader checks against the world,
not the file, is out of the chart's reach and listed in ``NOT_AT_RENDER``.

Shapes (pydantic's types, bounds, choices, required and unknown keys): ``templates/_config_shape.tpl``
checks them against the shapes ``config-schema --chart`` reads off the models, running the models'
validators where pydantic runs them. Every field of every section is probed with values drawn from its
shape, taken or refused, and the chart's answer must be check-config's, line for line; so must it for
configs with two mistakes, where the one named is the first pydantic meets (``values.schema.json`` no
longer checks shapes: Helm runs it first, in its own words)."""

from __future__ import annotations

import ast
import http.server
import inspect
import json
import os
import shutil
import subprocess
import sys
import threading
import typing
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.cli import main
from gateway.routing import capabilities
from gateway.runtime import config, config_environment, spend_config
from gateway.runtime.config import GatewayConfig
from gateway.runtime.shapes import config_shapes
from gateway.web import app
from tests.unit.helm_chart import CHART, HELM, helm

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
    "queue-reserve": {"models": [{**MOCK, "queue": {"capacity": 2, "reserve": 2}}]},
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
    config_environment: {"_someone_can_hold_a_key"},  # the key holder; the rest reads the pod's world
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


# Shapes: every field of every config section, each way pydantic refuses it (wrong type, out of
# range, not among the choices, unknown key) and the values at its bounds it takes, through
# check-config and through the chart's shape check (``templates/_config_shape.tpl``). The probes are
# drawn from the field's shape; the answer each must give is check-config's.

# Where one section sits in a config over BASE, around the least of it the loader takes.
HOSTS: dict[str, Any] = {
    "GatewayConfig": lambda s: s,
    "Server": lambda s: {"server": s},
    "ModelEntry": lambda s: {"models": [s]},
    "Target": lambda s: {"models": [{"name": "m", "targets": [s]}]},
    "Balance": lambda s: vllm(**POOL, balance=s),
    "KvEvents": lambda s: vllm(**POOL, balance={"kv_events": s}),
    "Timeouts": lambda s: vllm(base_url="http://a:8000/v1", timeouts=s),
    "Queue": lambda s: {"models": [{**MOCK, "queue": s}]},
    "Team": lambda s: {"teams": [s]},
    "KeyEntry": lambda s: {"teams": [{"id": "t", "keys": [s]}]},
    "Limits": lambda s: {"teams": [{"id": "t", "limits": s}]},
    "Budget": lambda s: {"teams": [{"id": "t", "budget": s}]},
    "Vendor": lambda s: {"vendors": {"v": s}},
    "LimitSettings": lambda s: {"limits": s},
    "SpendSettings": lambda s: {"spend": s},
    "Price": lambda s: {"spend": {"prices": [s]}},
    "Admin": lambda s: {"admin": s},
    "TracingConfig": lambda s: {"tracing": s},
    "Reload": lambda s: {"reload": s},
    "ResponsesStore": lambda s: {"responses": s},
}
LEAST: dict[str, dict[str, Any]] = {
    "GatewayConfig": BASE,
    "ModelEntry": MOCK,
    "Target": {"provider": "mock"},
    "KvEvents": EVENTS,
    "Queue": {"capacity": 4},
    "Team": {"id": "t"},
    "KeyEntry": {"id": "k", "sha256": SHA},
    "Budget": {"tokens": 1000},
    "Vendor": {"provider": "openai", "base_url": "https://o"},
    "Price": price(),
}
# What the chart writes itself (values.schema.json refuses yours): not probed.
CHART_OWNED = {("GatewayConfig", "redis"), ("LimitSettings", "replicas")}
UNPROBED_SECTIONS = {"RedisConfig": "config.redis is the chart's (CHART_OWNED)"}


def sections(model: type[BaseModel], seen: dict[str, type[BaseModel]] | None = None) -> dict[str, type[BaseModel]]:
    """Every config section (pydantic model) under ``model``, by name, read off the field types."""
    seen = {} if seen is None else seen
    seen[model.__name__] = model

    def types_in(annotation: Any) -> Iterator[Any]:
        yield annotation
        for arg in typing.get_args(annotation):
            yield from types_in(arg)

    for field in model.model_fields.values():
        for t in types_in(field.annotation):
            if isinstance(t, type) and issubclass(t, BaseModel) and t.__name__ not in seen:
                sections(t, seen)
    return seen


def bound_probes(kind: str, bounds: list[list[Any]]) -> list[Any]:
    """Each bound's value and its nearest neighbour past it: one taken, one refused (or both taken)."""
    step = 1 if kind == "int" else 0.5
    out: list[Any] = []
    for op, b, _ in bounds:
        out += [b, b + step] if op in ("le", "gt") else [b - step, b]
    return out


def probes(shape: dict[str, Any]) -> list[Any]:
    """Values for a field of ``shape``: of the wrong type, at and past its bounds, not among its
    choices, too short or too long, and some that pydantic's lax mode takes (``"7"`` for a number)."""
    t = shape["t"]
    if t == "null":
        return probes(shape["of"])
    if t == "union":
        return [p for member in shape["of"] for p in probes(member)]
    if t == "str":
        lengths = ([""] if "min" in shape else []) + (["x" * (shape["max"] + 1)] if "max" in shape else [])
        return [5, True, ["x"], {"a": "x"}, *lengths]
    if t in ("int", "float", "decimal"):
        lax = {"int": ["7", " 1_000 ", "2.0", True], "float": ["0.5", "1e3", "inf", True], "decimal": ["1.5", "inf"]}
        return ["abc", 1.5, [1], {"a": 1}, *lax[t], *bound_probes(t, shape.get("bounds", []))]
    if t == "bool":
        words = ["yes", "No", "ON", "off", "t", "F", "true", "False", "1", "0"]  # pydantic's, any case
        return ["abc", 2, 0.5, [True], " true", 0, *words]
    if t == "lit":
        return ["zzz", 5, shape["of"][-1]]
    if t == "list":
        wrong_item = [[p] for p in probes(shape["item"])[:1]]
        return ["x", {"a": 1}, *wrong_item, *([[]] if shape.get("min") else [])]
    if t == "dict":
        wrong = [{"k": p} for p in probes(shape["value"])[:1]]
        return ["x", [1], *wrong, *([{"zzz": "open"}] if shape["key"]["t"] == "lit" else [])]
    if t == "model":
        return ["x", [1], 5]
    assert t == "any", shape
    return []


def shape_cases(tokenizer: Path) -> dict[str, dict[str, Any]]:
    """One config over BASE per probe: each field of each section, and each section's unknown keys
    (each field's name less one letter, for difflib's "did you mean", and one near no field).
    ``tokenizer``: a directory with a tokenizer.json, which check-config looks for (the pod's files)."""
    shapes = config_shapes(GatewayConfig)
    cases: dict[str, dict[str, Any]] = {}
    for section, fields in shapes["models"].items():
        if section in UNPROBED_SECTIONS:
            continue
        host, least = HOSTS[section], LEAST.get(section, {})
        if section == "KvEvents":
            least = {**least, "tokenizer": str(tokenizer)}
        for name, shape, _ in fields:
            if (section, name) in CHART_OWNED:
                continue
            for i, value in enumerate(probes(shape)):
                cases[f"{section}.{name}-{i}"] = BASE | host({**least, name: value})
            misspelt = name[: len(name) // 2] + name[len(name) // 2 + 1 :]
            cases[f"{section}.{name}-misspelt"] = BASE | host({**least, misspelt: 1})
            if name in least:
                cases[f"{section}.{name}-missing"] = BASE | host({k: v for k, v in least.items() if k != name})
        cases[f"{section}-unknown"] = BASE | host({**least, "zzz_qq": 1})
    return cases


def test_every_config_section_is_probed() -> None:
    """A section added to the config without its place in HOSTS fails here, not silently unprobed."""
    assert set(sections(GatewayConfig)) == set(HOSTS) | set(UNPROBED_SECTIONS)
    assert set(config_shapes(GatewayConfig)["models"]) == set(sections(GatewayConfig))


def shape_problems(configs: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    """The chart's shape check of each config (``gw.shapeProblem``), in one ``helm template`` of a
    copy of the chart with one more template: "" for a config of the right shape."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()  # it knows no .Values.cases
    cases = 'problems:\n{{- range .Values.cases }}\n- {{ include "gw.shapeProblem" . | toJson }}\n{{- end }}\n'
    (chart / "templates" / "cases.yaml").write_text(cases)
    values = tmp_path / "cases.yaml"
    values.write_text(yaml.safe_dump({"cases": configs}))
    out = helm("template", "gw", str(chart), "-f", str(values), "--show-only", "templates/cases.yaml")
    assert out.returncode == 0, out.stderr
    problems: list[str] = yaml.safe_load(out.stdout)["problems"]
    return problems


def test_the_chart_refuses_each_shape_check_config_refuses_in_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    cases = shape_cases(tmp_path)
    lines = {case: check_config(cfg, tmp_path, capsys) for case, cfg in cases.items()}
    problems = dict(zip(cases, shape_problems(list(cases.values()), tmp_path), strict=True))
    wrong = {c: (lines[c], problems[c]) for c in cases if problems[c] and problems[c] != lines[c]}
    assert not wrong, "check-config's line, then the chart's:\n" + "\n".join(f"{c}: {w}" for c, w in wrong.items())
    # Of the right shape, and refused: by a rule of _config_check.tpl, which must give the same line.
    by_rule = {c for c in cases if lines[c] and not problems[c]}
    for case in sorted(by_rule):
        out = helm_refusal(cases[case], tmp_path)
        assert f"config: {lines[case]}\n" in out, f"{case}: check-config: {lines[case]}\nhelm: {out}"
    refused = sum(1 for c in cases if lines[c])
    assert refused > 3 * len(cases) // 5 and len(by_rule) < len(cases) // 10, (refused, len(by_rule), len(cases))


# One case per way a shape is refused, through the chart as `helm template` renders it (the check
# above runs the same template in a copy of the chart): Helm's own schema check must let each through.
SHAPES_RENDERED = {
    "unknown-key": {"modles": []},
    "unknown-nested": {"teams": [{"id": "t", "keys": [{"id": "k", "sha": SHA}]}]},
    "unknown-far": {"server": {"zzz_qq": 1}},
    "not-a-string": {"models": [{"name": "m", "targets": [{"provider": 5}]}]},
    "not-an-integer": {"server": {"port": "http"}},
    "fraction": {"server": {"workers": 1.5}},
    "not-a-number": {"teams": [{"id": "t", "deadline": [1]}]},
    "not-a-decimal": {"spend": {"prices": [price(input="free")]}},
    "not-a-bool": {"reload": {"watch": "sometimes"}},
    "below": {"teams": [{"id": "t", "limits": {"rpm": 0}}]},
    "above": {"tracing": {"sampling_ratio": 1.5}},
    "choice": {"auth": "token"},
    "too-long": {"spend": {"currency": "DOLLARS-US"}},
    "too-few": {"models": [{"name": "m", "targets": []}]},
    "required": {"models": [{"name": "m"}]},
    "not-a-list": {"teams": {"id": "t"}},
    "not-a-mapping": {"server": "0.0.0.0:8080"},
    "unknown-before-earlier": {"server": {"port": "http"}, "teams": [{"id": "t", "limit": {}}]},
    "label-escaped": {"teams": [{"id": "a\\b\tc\nd'e", "limits": {"rpm": 0}}]},  # as Python's repr writes it
}


@pytest.mark.parametrize("case", SHAPES_RENDERED)
def test_a_config_of_the_wrong_shape_fails_the_render_in_check_configs_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = BASE | SHAPES_RENDERED[case]
    line = check_config(cfg, tmp_path, capsys)
    assert line, "check-config takes it: not a refused config"
    out = helm_refusal(cfg, tmp_path)
    assert f"config: {line}\n" in out, f"check-config: {line}\nhelm: {out}"


@pytest.mark.parametrize("config", [5, "gateway", ["models"]], ids=["number", "string", "list"])
def test_a_config_that_is_no_mapping_fails_in_check_configs_line(
    config: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = check_config(config, tmp_path, capsys)
    out = helm("template", "gw", str(CHART), "--set-json", f"config={json.dumps(config)}")
    assert line and f"config: {line}\n" in out.stderr, f"check-config: {line}\nhelm: {out.stderr}"


def two_mistakes(tokenizer: Path) -> dict[str, dict[str, Any]]:
    """Configs with two mistakes in different top-level keys: one of shape per section (its first field
    of the wrong type) beside each refused config above, and beside each other's."""
    singles = shape_cases(tokenizer)
    shapes = config_shapes(GatewayConfig)["models"]
    firsts = {
        s: singles[f"{s}.{name}-0"]
        for s, fields in shapes.items()
        for name in [next(f[0] for f in fields if (s, f[0]) not in CHART_OWNED)]
        if s not in UNPROBED_SECTIONS
    }
    mistakes = {f"shape:{s}": cfg for s, cfg in firsts.items()} | {
        f"rule:{name}": BASE | case for name, case in REFUSED.items()
    }

    def changed(cfg: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cfg.items() if BASE.get(k) != v}

    out = {}
    names = sorted(mistakes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            first, second = changed(mistakes[a]), changed(mistakes[b])
            if (a.startswith("shape:") or b.startswith("shape:")) and not set(first) & set(second):
                out[f"{a}+{b}"] = BASE | first | second
    return out


def test_of_two_mistakes_the_chart_names_the_one_check_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic reports the first error of its walk (an unknown key before any): a validator's
    refusal in one section comes before a wrong type in a later one, and the chart's check walks
    the same way."""
    (tmp_path / "tokenizer.json").write_text("{}")
    cases = two_mistakes(tmp_path)
    lines = {case: check_config(cfg, tmp_path, capsys) for case, cfg in cases.items()}
    problems = dict(zip(cases, shape_problems(list(cases.values()), tmp_path), strict=True))
    wrong = {c: (lines[c], problems[c]) for c in cases if problems[c] != lines[c]}
    assert not wrong, "check-config's line, then the chart's:\n" + "\n".join(f"{c}: {w}" for c, w in wrong.items())
    assert len(cases) > 300, len(cases)


class Discovery(http.server.BaseHTTPRequestHandler):
    """What `helm install` asks a cluster before it renders: the version and the API groups. No
    Kubernetes API server can be had here from a package (envtest's kube-apiserver comes only as a
    download), so this answers those three paths; an install that renders gets no further."""

    ANSWERS: typing.ClassVar[dict[str, Any]] = {
        "/version": {"major": "1", "minor": "30", "gitVersion": "v1.30.0"},
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    }

    def do_GET(self) -> None:
        answer = self.ANSWERS.get(self.path.partition("?")[0])
        body = json.dumps(answer).encode()
        self.send_response(404 if answer is None else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment for `helm install`: a kubeconfig naming the discovery stub."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Discovery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "u"}}],
        "current-context": "stub",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    yield {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")}
    server.shutdown()
    thread.join()
    server.server_close()


INSTALLED = {k: SHAPES_RENDERED[k] for k in ("unknown-key", "not-an-integer", "unknown-before-earlier")} | {
    k: REFUSED[k] for k in ("team-twice", "http-no-address", "no-key-no-admin")
}


@pytest.mark.parametrize("case", INSTALLED)
def test_helm_install_refuses_with_check_configs_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: dict[str, str]
) -> None:
    """`helm install` (a client-side dry run: it renders as an install does, NOTES.txt included,
    then stops before the cluster's API) fails with the line `helm template` fails with."""
    cfg = BASE | INSTALLED[case]
    line = check_config(cfg, tmp_path, capsys)
    assert line, "check-config takes it: not a refused config"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": cfg, **CHART_VALUES.get(case, {})}))
    args = [HELM, "install", "gw", str(CHART), "-f", str(values), "--dry-run=client"]
    out = subprocess.run(args, capture_output=True, text=True, check=False, env=cluster)
    assert out.returncode and "INSTALLATION FAILED" in out.stderr and f"config: {line}\n" in out.stderr, out.stderr
