"""The embedded default's routes and start-up lines, and the model table rules they rest on: the
fallback vendor for names the local vLLM does not list, and a cool-down's 503 that says why."""

from __future__ import annotations

import pytest

from gateway.cli import in_process_targets
from gateway.core.errors import NoHealthyTarget, UpstreamFailed
from gateway.routing.table import FAILURES_TO_COOL, ModelTable
from gateway.runtime.defaults import announcement, embedded
from gateway.web.app import build_table


def test_demo_is_served_and_workers_stay_allowed() -> None:
    config, _ = embedded({})
    assert [(m.name, m.targets[0].provider) for m in config.models] == [("demo", "mock")]
    assert in_process_targets(config) == []  # the mock loads no model: --workers N is fine


def test_announcement_has_paste_ready_lines() -> None:
    config, local = embedded({})
    text = "\n".join(announcement(config, local, "0.0.0.0", 8080))
    assert "curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d '{" in text
    assert 'OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="none")' in text
    assert "set OPENAI_API_KEY to reach a vendor" in text
    keyed, local = embedded({"OPENAI_API_KEY": "sk-x", "LLM_GATEWAY_API_KEY": "k"})
    text = "\n".join(announcement(keyed, local, "127.0.0.1", 9000))
    assert "otherwise openai (the only vendor whose key is set)" in text
    assert "Authorization: Bearer" in text and 'os.environ["LLM_GATEWAY_API_KEY"]' in text


def table(env: dict[str, str]) -> ModelTable:
    config, local = embedded(env)
    return build_table(config, local)


def test_unlisted_names_go_to_the_only_vendor() -> None:
    models = table({"OPENAI_API_KEY": "sk-x"})
    assert models.resolve("gpt-4o-mini").route.upstreams[0].name == "vendor:openai"
    assert models.resolve("gpt-4o-mini").route.upstream_model == "gpt-4o-mini"
    models.listed["local-vllm"] = frozenset({"llama"})
    assert models.resolve("llama").route.upstreams[0].name == "local-vllm"
    assert models.resolve("demo").route.upstreams[0].provider == "mock"
    alone = table({})
    assert alone.fallback is None and alone.resolve("gpt-4o-mini").route.upstreams[0].name == "local-vllm"


def test_cool_down_names_its_cause() -> None:
    models = table({})
    route = models.resolve("llama").route
    local = route.upstreams[0]
    for _ in range(FAILURES_TO_COOL):
        models.failed(local, UpstreamFailed("target 'local-vllm' at http://x is unreachable (refused)"))
    with pytest.raises(NoHealthyTarget) as caught:
        models.order(route)
    assert "last failure: target 'local-vllm' at http://x is unreachable (refused)" in caught.value.message
    assert int(caught.value.headers["Retry-After"]) >= 1
