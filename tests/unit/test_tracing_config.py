"""The ``tracing`` config section: refused in one line when it is wrong, or when the extra it needs
is not installed, before anything is served."""

from __future__ import annotations

import sys

import pytest

from gateway import cli
from gateway.runtime.config import ConfigError, parse_config
from gateway.web.app import create_app
from gateway.web.state import GATEWAY

MODELS = [{"name": "m", "targets": [{"provider": "mock"}]}]


@pytest.mark.parametrize(
    ("tracing", "complaint"),
    [
        ({"endpoint": "collector:4318"}, "tracing.endpoint: must start with http:// or https://"),
        ({"sampling_ratio": 1.5}, "tracing.sampling_ratio"),
        ({"service_name": ""}, "tracing.service_name"),
        ({"endpont": "http://c:4318/v1/traces"}, "tracing.endpont"),
    ],
)
def test_a_wrong_tracing_section_is_refused_naming_the_key(tracing: dict[str, object], complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint.replace(".", r"\.")):
        parse_config({"models": MODELS, "auth": "none", "tracing": tracing})


def test_without_the_extra_the_app_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # a None entry in sys.modules makes its import raise ImportError, as an absent package does
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    config = parse_config({"models": MODELS, "auth": "none", "tracing": {}})
    with pytest.raises(ConfigError, match=r"pip install 'llm-gateway\[tracing\]'"):
        create_app(config)


def test_tracing_is_off_unless_configured() -> None:
    assert create_app(parse_config({"models": MODELS, "auth": "none"}))[GATEWAY].tracer is None


def test_check_config_says_in_one_line_that_the_extra_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    config = parse_config({"models": MODELS, "auth": "none", "tracing": {}})
    with pytest.raises(ConfigError) as caught:
        cli.check_extras(config, "gw.yaml")
    assert str(caught.value).startswith("gw.yaml: tracing: needs the optional extra: pip install")
    monkeypatch.undo()
    cli.check_extras(config, "gw.yaml")  # installed: nothing to say
