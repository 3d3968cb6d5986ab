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


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "gateway.example"])
def test_the_open_default_refuses_an_address_beyond_loopback(
    host: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key the embedded default answers anyone: beyond loopback, with OPENAI_API_KEY set, an
    open relay spending the key. ``serve`` exits before listening with one line saying how to proceed."""
    from gateway.cli import main

    monkeypatch.delenv("LLM_GATEWAY_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert main(["serve", "--host", host, "--port", "1"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --host ") and "LLM_GATEWAY_API_KEY" in line and "--allow-open" in line


def test_a_key_loopback_or_allow_open_lets_the_default_serve() -> None:
    from gateway.runtime.defaults import open_refusal

    config, _ = embedded({})
    assert open_refusal(config, "0.0.0.0", allow_open=False) is not None
    assert open_refusal(config, "0.0.0.0", allow_open=True) is None
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert open_refusal(config, loopback, allow_open=False) is None
    keyed, _ = embedded({"LLM_GATEWAY_API_KEY": "k"})
    assert open_refusal(keyed, "0.0.0.0", allow_open=False) is None


def test_the_printed_openai_line_runs_and_prints_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """The SDK line, pasted as printed, runs a whole (not streamed) completion and prints its text; the
    openai package is replaced by one that records the call."""
    import shlex
    import sys
    import types

    calls: list[dict[str, object]] = []

    class Completions:
        def create(self, **kwargs: object) -> object:
            calls.append(kwargs)
            message = types.SimpleNamespace(content="the answer")
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])

    class OpenAI:
        def __init__(self, base_url: str, api_key: str) -> None:
            self.chat = types.SimpleNamespace(completions=Completions())

    config, local = embedded({})
    (line,) = [x for x in announcement(config, local, "127.0.0.1", 8080) if "openai SDK" in x]
    words = shlex.split(line.partition(": ")[2])
    assert words[:2] == ["python", "-c"]
    fake = types.ModuleType("openai")
    fake.OpenAI = OpenAI  # type: ignore[attr-defined]
    saved = sys.modules.get("openai")
    sys.modules["openai"] = fake
    try:
        exec(words[2], {})
    finally:
        if saved is not None:
            sys.modules["openai"] = saved
        else:
            del sys.modules["openai"]
    assert capsys.readouterr().out == "the answer\n"
    (call,) = calls
    assert call["model"] == "demo" and "stream" not in call


def test_an_unreachable_target_tells_the_client_which_and_the_operator_where_and_how() -> None:
    """The embedded default's local vLLM, and the same target in a config file: one message for the
    client (no address, no command), a hint for the operator that fits where the target was defined."""
    import aiohttp

    from adapters.failures import unreachable
    from gateway.runtime.config import Target

    refused = aiohttp.ClientConnectorError(None, ConnectionRefusedError(111, "Connection refused"))  # type: ignore[arg-type]
    _, local = embedded({"VLLM_BASE_URL": "http://127.0.0.1:8011/v1"})
    err = unreachable("local-vllm", local, refused)
    assert err.message == "target 'local-vllm' is unreachable (connection refused)"
    assert "http://127.0.0.1:8011/v1" in err.hint and "vllm serve MODEL --port 8011" in err.hint
    assert "OPENAI_API_KEY" in err.hint and "--config FILE" in err.hint
    configured = Target(provider="vllm", base_url="http://10.0.0.5:8000/v1", name="gpu-box")
    err = unreachable("gpu-box", configured, refused)
    assert "10.0.0.5" not in err.message and "base_url in the config" in err.hint and "--config" not in err.hint
    member = unreachable("pool@10.0.0.5:8000", configured, refused)
    assert member.message == "target 'pool': a replica is unreachable (connection refused)"
