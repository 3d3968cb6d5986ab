"""One documented config format; a broken config is explained in one line (file, key path, reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.runtime.config import ConfigError, hash_key, parse_config
from gateway.runtime.config_environment import check_environment, key_hashes
from gateway.runtime.config_file import load_config
from gateway.runtime.defaults import embedded

GOOD = """
models:
  - name: tiny
    aliases: [openai/tiny]
    targets:
      - provider: vllm
        base_url: http://127.0.0.1:8000/v1/
        weight: 2
      - provider: openai
        base_url: https://example.invalid/v1
        model: gpt-x
        api_key_env: UPSTREAM_KEY
teams:
  - id: team1
    keys:
      - id: k1
        sha256: {digest}
      - id: k2
        env: TEAM1_KEY
"""


MOCK = "models: [{name: m, targets: [{provider: mock}]}]\n"
KEY = "{id: k, sha256: " + "a" * 64 + "}"
JARGON = ("Input should", "Tuple", "dictionary", "Value error", "Field required", "pydantic", "validation error")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(text)
    return path


def test_good_config(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM1_KEY", "secret-2")
    monkeypatch.setenv("UPSTREAM_KEY", "sk-upstream")
    path = write(tmp_path, GOOD.format(digest=hash_key("secret-1")))
    config = load_config(path)
    assert config.models[0].targets[0].base_url == "http://127.0.0.1:8000/v1"
    assert key_hashes(config.teams[0]) == [("k1", hash_key("secret-1")), ("k2", hash_key("secret-2"))]
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tiny, openai/tiny -> vllm" in out and "team team1: key k2 (env TEAM1_KEY)" in out
    assert "secret" not in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models: [{name: m, targets: []}]", "models['m'].targets: must list at least 1 item"),
        ("models: [{name: m, targets: [{provider: vllm, base_url: ftp://x}]}]", "base_url: must start with http"),
        ("models: [{name: m, targets: [{provider: vllm, base_url: http://x, wat: 1}]}]", "wat: unknown key"),
        ("teams: [{id: t, keys: [{id: k}]}]", "teams['t'].keys['k']: give exactly one of 'sha256' or 'env'"),
        ("teams: [{id: t, keys: [{id: k, sha256: abc}]}]", "'sha256' must be 64 lowercase hex digits"),
        ("models: [{name: m, targets: [{provider: nope, base_url: http://x}]}]", "unknown provider 'nope'"),
        ("models: [\n  - name: [", "line 2: invalid YAML"),
        ("models: [{name: m, targets: [{provider: vllm}]}]", "talks HTTP: give exactly one of 'base_url' or"),
        (
            "models: [{name: m, targets: [{provider: vllm, base_url: http://x, replicas: [http://y]}]}]",
            "give exactly one of 'base_url', 'replicas' or 'engine'",
        ),
        ("models: [{name: m, targets: [{provider: vllm, replicas: [http://y, http://y/]}]}]", "listed twice"),
        ("models: [{name: m, targets: [{provider: vllm, replicas: [ftp://y]}]}]", "replicas: must start with http"),
        ("models: [{name: m, targets: [{provider: vllm, engine: {model: x}}]}]", "is for in-process providers"),
        ("models: [{name: m, targets: [{provider: vllm-engine, base_url: http://x}]}]", "runs in this process"),
        # extra_features name only what a provider's upstream may add: a shipped plugin, a model's reasoning
        (
            "models: [{name: m, targets: [{provider: vllm, base_url: http://x, extra_features: [xtc, nope]}]}]",
            "models['m'].targets[0].extra_features[1]: 'nope' is not an extra feature of provider 'vllm'",
        ),
        (
            "models: [{name: m, targets: [{provider: openai, base_url: http://x, extra_features: [top_k]}]}]",
            "targets[0].extra_features[0]: 'top_k' is not an extra feature of provider 'openai' "
            "(it takes: effort, thinking)",
        ),
        (
            "models: [{name: m, targets: [{provider: vllm-engine, engine: {model: x}, extra_features: [echo]}]}]",
            "'echo' is not an extra feature of provider 'vllm-engine' (it takes: bad_word_tokens,",
        ),
        # a team's allow-list names a model the gateway serves (aliases and configured vendors count)
        (f"{MOCK}teams: [{{id: t, models: [m, nope], keys: [{KEY}]}}]", "teams['t'].models: unknown model 'nope'"),
        (f"{MOCK}teams: [{{id: t, models: [openai/x], keys: [{KEY}]}}]", "unknown model 'openai/x' (known: m)"),
        ("", "(top level): the file is empty"),
        ("- models", "(top level): must be a mapping of keys (models, teams, ...), not a list"),
        ("just words", "(top level): must be a mapping of keys (models, teams, ...), not a single value"),
        ("redis: {url: 'http://127.0.0.1:6379'}", "redis.url: must start with redis://, rediss:// or unix://"),
        (f"{MOCK}redis: {{url: '127.0.0.1:6379'}}", "redis.url: must start with redis://"),
        # a credential variable the config names is unset: refused here, not a 502 on the first request
        (
            "auth: none\nmodels: [{name: m, targets: [{provider: openai, base_url: http://x, api_key_env: UNSET_1}]}]",
            "models['m'].targets[0].api_key_env: environment variable UNSET_1 is not set",
        ),
        (
            "auth: none\nvendors: {openai: {provider: openai, base_url: http://x, api_key_env: UNSET_2}}",
            "vendors.openai.api_key_env: environment variable UNSET_2 is not set",
        ),
        ("teams: [{id: t, keys: [{id: k, env: UNSET_3}]}]", "teams['t'].keys['k'].env: environment variable UNSET_3"),
        (
            "auth: none\nmodels: [{name: m, targets: [{provider: openai, base_url: http://x, "
            "api_key_file: /nonexistent/key}]}]",
            "models['m'].targets[0].api_key_file: cannot read: No such file or directory",
        ),
        (
            "models: [{name: m, targets: [{provider: openai, base_url: http://x, api_key_env: A, api_key_file: /k}]}]",
            "models['m'].targets[0]: give at most one of 'api_key_env' or 'api_key_file'",
        ),
        ("reload: {poll_seconds: 0}", "reload.poll_seconds: must be greater than 0"),
        # keys are required (the default) but nobody can present one
        (f"{MOCK}teams: [{{id: t}}]", "teams: no team has a key and no admin key (LLM_GATEWAY_ADMIN_KEY) is set"),
        (f"{MOCK}teams: [{{id: t}}]", "add keys to a team ({id, sha256} or {id, env}), or set auth: none"),
        (f"{MOCK}admin: {{key_env: UNSET_4}}\nteams: [{{id: t}}]", "no admin key (UNSET_4) is set"),
        (MOCK, "teams: none given, and auth: keys (the default) needs one with a key"),
        # pydantic's words for shapes, in the config's words
        ("vendors: [openai]", "vendors: must be a mapping"),
        ("teams: {id: t}", "teams: must be a list"),
        ("auth: maybe", "auth: must be 'keys' or 'none'"),
        ("models: [{targets: [{provider: mock}]}]", "models[0].name: required"),
    ],
)
def test_broken_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    for var in ("UNSET_1", "UNSET_2", "UNSET_3", "UNSET_4", "LLM_GATEWAY_ADMIN_KEY"):
        monkeypatch.delenv(var, raising=False)
    path = write(tmp_path, text)
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and err.startswith(f"{path}: ") and expected in err, err
    assert not any(word in err for word in JARGON), err
    assert captured.out == ""


def test_team_models_count_aliases_and_configured_vendors() -> None:
    vendor = {"provider": "openai", "base_url": "http://x"}
    model = {"name": "m", "aliases": ["meta/m"], "targets": [{"provider": "mock"}]}
    allowed = ["m", "meta/m", "meta/m/my-lora", "other/m", "openai/gpt-x"]
    config = parse_config({"models": [model], "vendors": {"openai": vendor}, "teams": [{"id": "t", "models": allowed}]})
    assert config.teams[0].models == tuple(allowed)
    with pytest.raises(ConfigError, match=r"^<config>: teams\['t'\].models: unknown model 'openai/gpt-x'"):
        parse_config({"models": [model], "teams": [{"id": "t", "models": allowed}]})


def test_environment_checks_pass_once_the_environment_has_what_the_config_names() -> None:
    config = parse_config(
        {
            "models": [{"name": "m", "targets": [{"provider": "openai", "base_url": "http://x", "api_key_env": "UP"}]}],
            "teams": [{"id": "t"}],
            "admin": {"key_env": "ADMIN"},
        }
    )
    check_environment(config, env={"UP": "sk", "ADMIN": "a"})  # keys are issued at run time
    with pytest.raises(ConfigError, match="api_key_env: environment variable UP is empty"):
        check_environment(config, env={"UP": "", "ADMIN": "a"})
    with pytest.raises(ConfigError, match="no admin key"):
        check_environment(config, env={"UP": "sk"})
    check_environment(config.model_copy(update={"auth": "none"}), env={"UP": "sk"})


def test_missing_key_env_names_the_variable(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "teams: [{id: t, keys: [{id: k, env: NOPE_NOT_SET}]}]"))
    with pytest.raises(ConfigError, match="NOPE_NOT_SET"):
        key_hashes(config.teams[0], env={})


def test_embedded_default_uses_environment() -> None:
    config, local = embedded({"OPENAI_API_KEY": "sk-x", "VLLM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert set(config.vendors) == {"openai"} and config.auth == "none" and local.base_url == "http://127.0.0.1:9/v1"
    keyed, _ = embedded({"LLM_GATEWAY_API_KEY": "k"})
    assert keyed.auth == "keys" and keyed.vendors == {}


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs: ``width ** levels`` values once its aliases are expanded, a few hundred bytes."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"models: *a{levels}"]) + "\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (alias_bomb(), "values once aliases are expanded"),
        ("a: &a [*a]\nmodels: *a\n", "values once aliases are expanded"),  # an alias of itself
        ("models: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ],
    ids=["billion-laughs", "cycle", "deep"],
)
def test_a_yaml_bomb_is_refused_before_it_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, reason: str
) -> None:
    """The file is measured on YAML's node graph: nothing of the expanded document is built."""
    built: list[object] = []
    monkeypatch.setattr("yaml.SafeLoader.construct_document", lambda self, node: built.append(node))
    with pytest.raises(ConfigError, match=reason):
        load_config(write(tmp_path, text))
    assert built == []


def test_anchors_and_aliases_within_the_bound_still_load(tmp_path: Path) -> None:
    target = "&t {provider: openai, base_url: 'http://127.0.0.1:9', api_key_env: HOME}"
    text = f"models:\n  - {{name: a, targets: [{target}]}}\n  - {{name: b, targets: [*t]}}\n"
    config = load_config(write(tmp_path, text))
    assert [m.targets[0].provider for m in config.models] == ["openai", "openai"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"models: []\nteams: [\xff\xfe]\n", "byte 19: the file is not UTF-8 text"),
        (b"models: []\n#" + b"x" * (5 * 1024 * 1024), "larger than 4 MiB"),
    ],
    ids=["not-utf8", "huge"],
)
def test_a_file_that_is_no_config_text_is_refused_in_one_line(tmp_path: Path, raw: bytes, reason: str) -> None:
    path = tmp_path / "gw.yaml"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=reason) as caught:
        load_config(path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(path))
