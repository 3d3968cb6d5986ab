"""The configuration reference (docs/configuration.md) is checked against the config's pydantic models:
every field of every model is named there, so a new setting cannot ship undocumented."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest

from gateway.runtime import config, spend_config

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
# The names the reference sets as code: every word of its code blocks (the example config) and of its
# backticked spans (`redis.url`, `{id, sha256}`); prose does not count.
BLOCKS = re.findall(r"^```[^\n]*\n(.*?)^```", DOC, flags=re.S | re.M)
PROSE = re.sub(r"^```[^\n]*\n.*?^```", "", DOC, flags=re.S | re.M)
NAMED = {word for text in [*BLOCKS, *re.findall(r"`([^`\n]+)`", PROSE)] for word in re.findall(r"\w+", text)}
MODELS = sorted(
    (
        m
        for module in (config, spend_config)  # spend_config: the config's spend section and team budgets
        for m in vars(module).values()
        if isinstance(m, type) and issubclass(m, pydantic.BaseModel) and m.__module__ == module.__name__
    ),
    key=lambda m: m.__name__,
)
FIELDS = [(m.__name__, name) for m in MODELS for name in m.model_fields]


@pytest.mark.parametrize(("model", "field"), FIELDS, ids=[f"{m}.{f}" for m, f in FIELDS])
def test_every_config_field_is_documented(model: str, field: str) -> None:
    assert field in NAMED, f"{model}.{field} is not in docs/configuration.md"


def test_the_check_sees_the_models() -> None:
    assert {"GatewayConfig", "Server", "Target", "Team", "Limits"} <= {m.__name__ for m in MODELS}


def test_the_config_modules_docstring_lists_every_section() -> None:
    """``gateway/runtime/config.py`` opens with the file's sections, one ``name:`` line each: a new
    section is listed there too."""
    doc = config.__doc__ or ""
    listed = set(re.findall(r"^    (\w+):", doc, flags=re.M))
    assert listed == set(config.GatewayConfig.model_fields), "sections missing from, or stale in, the docstring"
