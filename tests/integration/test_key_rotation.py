"""Upstream key rotation without a restart: a target's ``api_key_file`` (a Kubernetes Secret mount) is
rewritten, and the gateway takes the new key, against a fake upstream that accepts only the new one.
Found two ways: an upstream 401 makes the gateway read the file once more and try once more; and the
poll (``reload.poll_seconds``) sees the file change before any request is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import aiohttp

from gateway.runtime.config import hash_key, parse_config
from gateway.web.state import GATEWAY
from tests.fakes import upstream as fake
from tests.integration import test_reload
from tests.integration.conftest import GatewayFactory
from tests.support.waiting import eventually

OLD, NEW, CLIENT = "upstream-old-key", "upstream-new-key", "client-key"
served = test_reload.served  # a real ``llm-gateway serve``


def put(path: Path, text: str) -> None:
    """As the kubelet updates a Secret mount: the new file replaces the old in one rename."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def config(upstream: str, key_file: Path, poll: float) -> str:
    return (
        "models:\n  - name: m\n    targets:\n"
        f"      - {{provider: openai, base_url: '{upstream}', api_key_file: '{key_file}'}}\n"
        f"teams:\n  - id: t\n    keys: [{{id: k, sha256: {hash_key(CLIENT)}}}]\n"
        f"reload: {{poll_seconds: {poll}}}\n"
    )


async def ask(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    body = {"model": "m", "prompt": "hello", "max_tokens": 4}
    async with session.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {CLIENT}"}) as r:
        return r.status, await r.text()


def keys_sent(upstream: fake.Upstream) -> list[str]:
    return [r.headers["authorization"].removeprefix("Bearer ") for r in upstream.requests]


async def test_a_401_rereads_the_key_file_once_and_retries_with_the_new_key(served: Any, tmp_path: Path) -> None:
    """The poll is set too slow to matter: only the 401 path can find the new key. While the file
    holds the old key the refusal is reported (502, once tried); rewritten, the next request succeeds
    without a restart. No key in any log line."""
    async with await fake.start("openai", models=["m"], api_key=NEW) as upstream:
        key_file = tmp_path / "secret" / "api-key"
        key_file.parent.mkdir()
        key_file.write_text(OLD + "\n")
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(config(upstream.url, key_file, poll=3600))
        gw = await served(cfg)
        url = gw.url
        async with aiohttp.ClientSession() as session:
            status, text = await ask(session, url)
            assert status == 502 and "refused the gateway's credentials" in text
            assert keys_sent(upstream) == [OLD]  # the file held no other key: no second try
            put(key_file, NEW + "\n")
            assert (await ask(session, url))[0] == 200
            assert keys_sent(upstream) == [OLD, OLD, NEW]  # refused, re-read, sent once more
            assert (await ask(session, url))[0] == 200
            assert keys_sent(upstream)[3:] == [NEW]
    logged = await gw.stop()
    assert OLD not in logged and NEW not in logged and CLIENT not in logged


async def test_the_poll_takes_a_rewritten_key_file_before_any_refusal(gateway: GatewayFactory, tmp_path: Path) -> None:
    async with await fake.start("openai", models=["m"], api_key=NEW) as upstream:
        key_file = tmp_path / "api-key"
        key_file.write_text(OLD)
        cfg = parse_config(
            {
                "models": [
                    {
                        "name": "m",
                        "targets": [{"provider": "openai", "base_url": upstream.url, "api_key_file": str(key_file)}],
                    }
                ],
                "teams": [{"id": "t", "keys": [{"id": "k", "sha256": hash_key(CLIENT)}]}],
                "reload": {"poll_seconds": 0.02},
            }
        )
        gw = await gateway(cfg)
        state = gw.server.app[GATEWAY]
        put(key_file, NEW)
        (secret,) = state.secrets.by_source.values()

        async def taken() -> bool:
            return secret.value == NEW

        await eventually(taken, "the poll re-read the key file")
        assert (await ask(gw.session, gw.url.rstrip("/")))[0] == 200
        assert keys_sent(upstream) == [NEW]
