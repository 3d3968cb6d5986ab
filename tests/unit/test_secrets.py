"""Upstream credentials re-read while the gateway runs (``gateway/runtime/secrets.py``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gateway.runtime.config import ConfigError, Target, hash_key, parse_config
from gateway.runtime.config_environment import check_environment
from gateway.runtime.secrets import Secret, Secrets


def swap(path: Path, text: str) -> None:
    tmp = path.with_name("new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_file_is_read_stripped_and_seen_stale_only_once_changed(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("first\n")
    secret = Secret(file=str(f))
    assert (secret.value, secret.stale(), secret.source) == ("first", False, f"file {f}")
    swap(f, "second\n")
    assert secret.stale() and secret.refresh() and secret.value == "second"
    assert not secret.stale() and not secret.refresh()


@pytest.mark.parametrize("gone", ["empty", "missing"])
def test_an_empty_or_missing_file_keeps_the_key_it_had(tmp_path: Path, gone: str) -> None:
    """A Secret mount is briefly empty while the kubelet swaps it: no request goes out keyless."""
    f = tmp_path / "key"
    f.write_text("kept")
    secret = Secret(file=str(f))
    if gone == "empty":
        f.write_text("")
    else:
        f.unlink()
    assert not secret.refresh() and secret.value == "kept"


def test_renewed_only_when_the_source_holds_another_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTATED_KEY", "one")
    secret = Secret(env="ROTATED_KEY")
    assert not secret.renewed("one")
    monkeypatch.setenv("ROTATED_KEY", "two")
    assert secret.renewed("one") and secret.value == "two"
    assert not secret.stale()  # a variable is never polled


def test_targets_naming_one_source_share_its_secret(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("k")
    secrets = Secrets()
    a = secrets.for_target(Target(provider="openai", base_url="http://a", api_key_file=str(f)))
    b = secrets.for_target(Target(provider="vllm", base_url="http://b", api_key_file=str(f)))
    assert a is b
    swap(f, "k2")
    assert secrets.refresh_stale() == [f"file {f}"] and b.value == "k2"
    assert secrets.refresh_stale() == []


UNUSABLE = {
    "newline": (b"abc\ndef", "a line break at character 3"),
    "not-utf8": (b"abc\xff", "not UTF-8 text (byte 3)"),
    "megabyte": (b"k" * 1_000_000, "longer than 16 KiB"),
    "control": (b"abc\x00", "a character an HTTP header cannot carry at character 3"),
}


@pytest.mark.parametrize("case", UNUSABLE)
def test_an_unusable_key_is_never_the_value_and_says_why_without_its_bytes(tmp_path: Path, case: str) -> None:
    raw, why = UNUSABLE[case]
    path = tmp_path / "key"
    path.write_text("good-key\n")
    secret = Secret(file=str(path))
    path.with_name("new").write_bytes(raw)
    os.replace(path.with_name("new"), path)
    assert secret.stale() and not secret.refresh()
    assert secret.value == "good-key" and secret.problem == why
    assert not secret.stale()  # read once: the next poll waits for the next change
    fresh = Secret(file=str(path))
    assert fresh.value is None and fresh.problem == why


@pytest.mark.parametrize("case", UNUSABLE)
def test_check_config_refuses_an_unusable_key_file_or_variable_by_name(tmp_path: Path, case: str) -> None:
    raw, why = UNUSABLE[case]
    path = tmp_path / "key"
    path.write_bytes(raw)
    target = {"provider": "openai", "base_url": "http://127.0.0.1:9"}
    teams = [{"id": "t", "keys": [{"id": "k", "sha256": hash_key("x")}]}]
    config = parse_config(
        {"models": [{"name": "m", "targets": [{**target, "api_key_file": str(path)}]}], "teams": teams}
    )
    with pytest.raises(ConfigError, match=f"api_key_file: not a usable key: {re.escape(why)}"):
        check_environment(config, "gw.yaml", {})
    if case in ("newline", "control"):  # what a variable can hold
        config = parse_config({"models": [{"name": "m", "targets": [{**target, "api_key_env": "K"}]}], "teams": teams})
        with pytest.raises(ConfigError, match=r"api_key_env: \$K is not a usable key"):
            check_environment(config, "gw.yaml", {"K": raw.decode()})
