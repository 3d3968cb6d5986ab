"""Streams that survive their replica, on the real engine: two ``vllm serve`` replicas of the tiny model
in one pool; a greedy 300-token stream whose replica is SIGKILLed (or SIGSTOPped past the idle bound)
past its 50th token reaches each streaming dialect's client whole: the unbroken
run's text, one finish, the same usage, 300 completion tokens (``gateway/routing/resume.py``). The
rig is ``tests/vllm/resume_rig.py``; the scorecard's real-vLLM rows run the same."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.dialect_clients import STREAMING, completion_tokens
from tests.vllm import resume_rig as rig
from tests.vllm.conftest import running_vllm

# Not Responses: a Responses stream goes to vLLM's own /v1/responses (it renders and samples apart from
# its chat path), which returns no token ids, so its continuation is from text, through chat: not the
# unbroken answer token for token (docs/vllm.md). Messages goes as chat when it may resume.
BY_NAME = {i.name: i for i in STREAMING if i.name != "responses"}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[rig.Replica]]:
    with rig.replica_pair(tmp_path_factory.mktemp("resume"), running_vllm) as made:
        yield made


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["sigkill", "sigstop"])
@pytest.mark.parametrize("dialect", list(BY_NAME))
async def test_a_stream_whose_replica_dies_arrives_whole(
    replicas: list[rig.Replica], dialect: str, sig: signal.Signals
) -> None:
    ingress = BY_NAME[dialect]
    async with aiohttp.ClientSession() as session, rig.gateway(replicas) as (url, breakers):
        want = await rig.read(session, url, ingress)
        assert want.complete and want.finishes == 1 and want.text, want
        got, fault_came, resumed = await rig.broken(session, url, breakers, ingress, sig)
    assert fault_came, f"the answer ended before {rig.BREAK_AT} tokens had passed the rig: {got}"
    assert resumed == 1, "the fault came after the replica had sent the whole answer"
    assert got.complete and not got.error and got.finishes == 1, got
    assert got.usage == want.usage, (got, want)
    assert got.text == want.text, (got.text, want.text)
    if want.usage is not None:  # SGP's streams carry no usage
        assert completion_tokens(want.usage) == rig.TOKENS, want.usage
