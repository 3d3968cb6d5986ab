"""POST /v1/responses at its edges, as an independent test team found them: a stream that breaks on
any target never ends as ``response.completed``; a streamed answer names the model its whole twin
names; what a client asks for is never dropped unsaid (``tool_choice`` without its tool, an empty
``text.format``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.test_responses import CHAT_KINDS, post, scripted_target, scripted_upstream

JSON = Any
FAST = {"connect": 1, "first_byte": 2, "idle": 0.5, "total": 10}
BREAKS = ["error_after=2", "reset_after=2"]
FINISHED = {"response.completed", "response.incomplete"}


@pytest.mark.parametrize("kind", CHAT_KINDS)
@pytest.mark.parametrize("fault", BREAKS)
async def test_a_broken_stream_never_ends_as_completed(
    gateway: GatewayFactory, upstream: Any, kind: str, fault: str
) -> None:
    server = await upstream(kind, faults=f"[[fault:{fault}]]")
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind, timeouts=FAST)]}]))
    status, streamed = await post(gw, {"model": "m", "input": "hello there", "stream": True})
    assert status == 200, streamed
    types = [e["type"] for e in streamed]
    assert "response.output_text.delta" in types, types  # the break came after the first text
    assert "error" in types and not FINISHED & set(types), types


async def test_a_streamed_answer_names_the_model_its_whole_twin_names(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([{"name": "m", "targets": [scripted_target(server)]}]))
        status, whole = await post(gw, {"model": "m", "input": "hi"})
        assert status == 200, whole
        status, streamed = await post(gw, {"model": "m", "input": "hi", "stream": True})
        assert status == 200, streamed
        models = {e["response"]["model"] for e in streamed if "response" in e}
        assert models == {whole["model"]}, (models, whole["model"])
