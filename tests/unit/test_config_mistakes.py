"""Config mistakes are named where they are: a misspelt key in any section of the config gets the
section's nearest keys ("did you mean"), and a name given twice (a team id, a model name) names the
name and both list positions."""

from __future__ import annotations

import typing
from typing import Any

import pydantic
import pytest

from gateway.runtime.config import ConfigError, GatewayConfig, parse_config
from gateway.runtime.config_messages import bare

Path = tuple[int | str, ...]


def sections(model: type[pydantic.BaseModel], at: Path = ()) -> list[tuple[Path, type[pydantic.BaseModel]]]:
    """Every config section (a pydantic model) reachable from the top, each with one path to it: a
    list's first item, a mapping's key ``k``. Found from the field types, so a new section is in."""
    found = [(at, model)]
    for name, field in model.model_fields.items():
        node, path = bare(field.annotation), (*at, name)
        origin = typing.get_origin(node)
        if origin is tuple:
            node, path = bare(typing.get_args(node)[0]), (*path, 0)
        elif origin is dict:
            node, path = bare(typing.get_args(node)[1]), (*path, "k")
        if isinstance(node, type) and issubclass(node, pydantic.BaseModel) and node is not model:
            found += sections(node, path)
    return found


SECTIONS = sections(GatewayConfig)
SECTION_KEYS = {path: list(model.model_fields) for path, model in SECTIONS}
KEYS = [(path, name) for path, model in SECTIONS for name in model.model_fields]


def placed(path: Path, key: str) -> Any:
    """A document holding only ``key: 1`` at ``path`` (list items and mapping keys built on the way)."""
    node: Any = {key: 1}
    for part in reversed(path):
        node = [node] if isinstance(part, int) else {part: node}
    return node


def refusal(data: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "gw.yaml")
    return str(caught.value)


def test_every_section_is_found() -> None:
    names = {model.__name__ for _, model in SECTIONS}
    assert {"Server", "Target", "Timeouts", "KvEvents", "Team", "Limits", "Budget", "Price", "Vendor"} <= names


@pytest.mark.parametrize(("path", "key"), KEYS, ids=[".".join(map(str, (*p, k))) for p, k in KEYS])
def test_a_misspelt_key_in_any_section_gets_its_nearest_keys(path: Path, key: str) -> None:
    for typo in (key + "x", key[:-2] + key[-1] + key[-2]):
        if typo == key:
            continue
        line = refusal(placed(path, typo))
        if len(key) <= 2 and "did you mean" not in line:  # "di" is as far from "id" as from "env"
            assert line.endswith(f"{typo}: unknown key (known here: {', '.join(SECTION_KEYS[path])})"), line
            continue
        assert f"{typo}: unknown key; did you mean " in line, line
        assert repr(key) in line.split("did you mean ", 1)[1], line


def test_a_key_like_none_lists_the_section() -> None:
    line = refusal({"teams": [{"id": "a", "limits": {"zzzz": 1}}]})
    assert line == "gw.yaml: teams['a'].limits.zzzz: unknown key (known here: rpm, rpm_burst, tpm, concurrency)"


def test_a_misspelling_is_named_before_the_key_it_leaves_missing() -> None:
    line = refusal({"spend": {"prices": [{"model": "m", "inptu": 1, "output": 1}]}})
    assert line == "gw.yaml: spend.prices[0].inptu: unknown key; did you mean 'input'?"


def test_a_team_id_given_twice_names_the_id_and_both_positions() -> None:
    teams = [{"id": "a"}, {"id": "b"}, {"id": "a"}]
    line = refusal({"teams": teams})
    assert line == "gw.yaml: teams[2].id: team id 'a' is declared twice; first at teams[0]"


def test_a_model_name_given_twice_names_the_name_and_both_positions() -> None:
    mock = [{"provider": "mock"}]
    models = [{"name": "m", "targets": mock}, {"name": "n", "aliases": ["m"], "targets": mock}]
    line = refusal({"models": models})
    assert line == "gw.yaml: models[1]: model name 'm' is declared twice; first at models[0]"
    line = refusal({"models": [{"name": "m", "aliases": ["m"], "targets": mock}]})
    assert line == "gw.yaml: models[0]: model name 'm' is declared twice"


def queued(queue: dict[str, Any], **extra: Any) -> dict[str, Any]:
    target = {"provider": "openai", "base_url": "http://127.0.0.1:1", "model": "u", "api_key_env": "X"}
    return {"models": [{"name": "m", "targets": [target], "queue": queue}], "teams": [], **extra}


HOSTILE_QUEUES = [
    ("capacity", 0),
    ("capacity", -1),
    ("capacity", 10**400),  # past a float: the share's division raised OverflowError at load
    ("capacity", 2**53 + 1),  # past Redis's Lua numbers
    ("capacity", "AUTO"),
    ("capacity", None),
    ("max_waiting", -1),
    ("max_waiting", 10**30),
    ("timeout", 0),
    ("timeout", -1.0),
    ("timeout", float("nan")),
    ("timeout", float("inf")),  # a waiter that never hears back
    ("timeout", 1e308),
    ("share", 0),
    ("share", 10**400),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_QUEUES, ids=lambda v: repr(v)[:24])
def test_a_hostile_queue_value_is_refused_at_load_in_one_line_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(queued({"capacity": 4, field: value}))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"<config>: models['m'].queue.{field}: "), message  # no union tag in the path


@pytest.mark.parametrize("name", ["", " batch", "batch ", "a, b", "Batch\t", "é", "x" * 65, "-x"])
def test_a_class_the_priority_header_cannot_name_is_refused_at_load(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^<config>: priorities\[1\]: a class is one token of ") as caught:
        parse_config(queued({"capacity": 4}, priorities=["interactive", name]))
    assert "\n" not in str(caught.value)
