"""One documented config format; a broken config is explained in one line (file, key path, reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.runtime.config import ConfigError, hash_key, key_hashes, load_config
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


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(text)
    return path


def test_good_config(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM1_KEY", "secret-2")
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
        ("models: [{name: m, targets: []}]", "models['m'].targets: Tuple should have at least 1 item"),
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
    ],
)
def test_broken_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and expected in err, err


def test_missing_key_env_names_the_variable(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "teams: [{id: t, keys: [{id: k, env: NOPE_NOT_SET}]}]"))
    with pytest.raises(ConfigError, match="NOPE_NOT_SET"):
        key_hashes(config.teams[0], env={})


def test_embedded_default_uses_environment() -> None:
    config, local = embedded({"OPENAI_API_KEY": "sk-x", "VLLM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert set(config.vendors) == {"openai"} and config.auth == "none" and local.base_url == "http://127.0.0.1:9/v1"
    keyed, _ = embedded({"LLM_GATEWAY_API_KEY": "k"})
    assert keyed.auth == "keys" and keyed.vendors == {}
