"""The upstream key-file fault suite: a key file holding what cannot be a key (a line break inside,
bytes that are not UTF-8, a megabyte, a control character), at start-up or swapped in while the
upstream refuses the old key, gives no 500 and no traceback: the client gets 502 naming the target's
credential failure (``upstream_credentials``) without a byte of the file, and the operator one log
line per problem. A key rotated upstream before the file is taken as soon as the file is, even from a
cool-down."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.runtime.config import hash_key, parse_config
from gateway.web.state import GATEWAY
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory
from tests.support.waiting import eventually

OLD, NEW, CLIENT = "upstream-old-key", "upstream-new-key", "client-key"
CANARY = b"KEYBYTES"
BAD = {
    "newline": CANARY + b"\nsecond-line",
    "not-utf8": CANARY + b"\xff\xfe\x80",
    "megabyte": CANARY + b"k" * 1_000_000,
    "control": CANARY + b"\x00x",
}
REQUESTS = 12  # per case: enough to cool the target (3 failures) and ask it again while it cools


def put(path: Path, raw: bytes) -> None:
    """As the kubelet updates a Secret mount: the new file replaces the old in one rename."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(raw)
    os.replace(tmp, path)


def gateway_config(upstream: str, key_file: Path, poll: float = 3600) -> Any:
    target = {"provider": "openai", "base_url": upstream, "api_key_file": str(key_file)}
    return parse_config(
        {
            "models": [{"name": "m", "targets": [target]}],
            "teams": [{"id": "t", "keys": [{"id": "k", "sha256": hash_key(CLIENT)}]}],
            "reload": {"poll_seconds": poll},
        }
    )


async def ask(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    body = {"model": "m", "prompt": "hello", "max_tokens": 4}
    headers = {"Authorization": f"Bearer {CLIENT}"}
    async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
        return r.status, await r.read()


def check_answers(answers: list[tuple[int, Any]]) -> None:
    """Every answer a credential failure (502) or a cool-down it caused (503), never 500, naming the
    cause, never quoting the file."""
    assert {s for s, _ in answers} <= {502, 503}, answers
    for status, raw in answers:
        assert CANARY not in raw and b"kkkkkkkk" not in raw
        if status == 502:
            assert b"upstream_credentials" in raw or b"credentials" in raw or b"usable key" in raw, raw


def check_logs(caplog: pytest.LogCaptureFixture, problems: int) -> None:
    """No traceback, nothing of the file, and the problem said once."""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert CANARY.decode() not in text
    unusable = [r for r in caplog.records if "unusable" in r.getMessage()]
    assert len(unusable) == problems, [r.getMessage() for r in unusable]


@pytest.mark.parametrize("case", BAD)
async def test_a_bad_key_file_at_start_up_is_a_named_502_never_a_500(
    gateway: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    async with await fake.start("openai", models=["m"], api_key=NEW) as upstream:
        key_file = tmp_path / "api-key"
        key_file.write_bytes(BAD[case])
        caplog.set_level(logging.INFO)
        gw = await gateway(gateway_config(upstream.url, key_file))
        answers = [await ask(gw.session, gw.url.rstrip("/")) for _ in range(REQUESTS)]
        check_answers(answers)
        assert answers[0][0] == 502 and b"has no usable key" in answers[0][1]
        assert upstream.requests == []  # nothing unusable was ever sent
        check_logs(caplog, problems=1)


@pytest.mark.parametrize("case", BAD)
async def test_a_bad_key_file_swapped_in_after_a_401_is_a_named_502_never_a_500(
    gateway: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    """The upstream takes only the new key; the file goes from the old key to bad bytes: each 401
    looks at the file (changed once), finds nothing usable, and the old key's refusal is the answer."""
    async with await fake.start("openai", models=["m"], api_key=NEW) as upstream:
        key_file = tmp_path / "api-key"
        key_file.write_text(OLD)
        caplog.set_level(logging.INFO)
        gw = await gateway(gateway_config(upstream.url, key_file, poll=0.02))
        put(key_file, BAD[case])
        answers = [await ask(gw.session, gw.url.rstrip("/")) for _ in range(REQUESTS)]
        check_answers(answers)
        assert answers[0][0] == 502 and b"refused the gateway's credentials" in answers[0][1]
        assert {r.headers["authorization"] for r in upstream.requests} == {f"Bearer {OLD}"}
        check_logs(caplog, problems=1)
        (secret,) = gw.server.app[GATEWAY].secrets.by_source.values()
        put(key_file, NEW.encode())  # fixed: the poll takes it and ends the cool-down the refusals caused

        async def taken() -> bool:
            return secret.value == NEW

        await eventually(taken, "the poll re-read the key file")
        assert (await ask(gw.session, gw.url.rstrip("/")))[0] == 200
        assert any("usable again" in r.getMessage() for r in caplog.records)


async def test_a_key_rotated_upstream_first_is_taken_from_a_cool_down_when_the_file_is(
    gateway: GatewayFactory, tmp_path: Path
) -> None:
    """The upstream refuses the file's key until the target cools; the file then gets the new key, and
    the poll's re-read ends the cool-down it caused: the next request is served, not a 503 for the rest
    of the cool-down."""
    async with await fake.start("openai", models=["m"], api_key=NEW) as upstream:
        key_file = tmp_path / "api-key"
        key_file.write_text(OLD)
        gw = await gateway(gateway_config(upstream.url, key_file, poll=0.02))
        url = gw.url.rstrip("/")
        statuses = [(await ask(gw.session, url))[0] for _ in range(4)]
        assert statuses == [502, 502, 502, 503]  # three refusals cool the target
        state = gw.server.app[GATEWAY]
        (secret,) = state.secrets.by_source.values()
        put(key_file, NEW.encode())

        async def taken() -> bool:
            return secret.value == NEW

        await eventually(taken, "the poll re-read the key file")
        assert (await ask(gw.session, url))[0] == 200
