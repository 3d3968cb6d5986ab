"""No false endings, at every fault position: an upstream's answer cut at any byte (between SSE events,
inside one, inside a chunk of its chunked body) by a reset, a close, or an end that looks clean, in
every ingress dialect against every upstream kind. The client never gets a normal finish and its
dialect's terminator for an answer that was cut; a whole answer cut short is never a 200.

``tests/integration/test_stream_breaks.py`` breaks streams at one place by fault markers; this file
cuts a recorded answer everywhere (``tests/support/cut_upstream.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.routing import table
from tests.fakes import upstream as fake
from tests.integration.conftest import UPSTREAM_KEY_ENV, Gateway, GatewayFactory, config
from tests.integration.dialect_clients import STREAMING, Ingress, body_of, read_stream, read_whole
from tests.support.cut_upstream import Cut, CutProxy, offsets

KINDS = list(fake.KINDS)
TIMEOUTS = {"connect": 1, "first_byte": 5, "idle": 2, "total": 10}


@pytest.fixture(autouse=True)
def never_cool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cut is one failure of the one target: it must not cool down, or the rest are 503s."""
    monkeypatch.setattr(table, "FAILURES_TO_COOL", 1 << 30)


@pytest.fixture
async def cut_gateway(gateway: GatewayFactory) -> AsyncIterator[Any]:
    made: list[tuple[fake.Upstream, CutProxy]] = []

    async def make(kind: str) -> tuple[CutProxy, Gateway]:
        origin = await fake.start(kind)
        proxy = await CutProxy(origin.origin).start()
        made.append((origin, proxy))
        provider = "friendli" if kind == "friendli2024" else kind
        suffix = origin.url.removeprefix(origin.origin)
        tgt = {
            "provider": provider,
            "base_url": proxy.url + suffix,
            "model": "up-model",
            "api_key_env": UPSTREAM_KEY_ENV,
            "timeouts": TIMEOUTS,
        }
        return proxy, await gateway(config([{"name": "m", "targets": [tgt], "resume": False}]))

    yield make
    for origin, proxy in made:
        await proxy.close()
        await origin.close()


async def send(gw: Gateway, ingress: Ingress, stream: bool, kind: str) -> tuple[int, bytes]:
    # A Friendli client's answer draws a seed when it gave none: one given, every answer is as long as
    # the first, where the cuts were measured. Anthropic takes none (and draws none).
    seeded = {"seed": 1} if ingress.name.startswith("friendli") and kind != "anthropic" else {}
    path, headers, body = ingress.request("m", "hello there friend", stream, max_tokens=4, **seeded)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        raw, _ = await body_of(resp)
        return resp.status, raw


async def never_complete(
    proxy: Any,
    again: Callable[[], Awaitable[tuple[int, bytes]]],
    hows: tuple[str, ...],
    complete: Callable[[int, bytes], bool],
) -> None:
    """The answer ``again`` gets with its upstream body cut at every offset, each way of ``hows``: never
    ``complete`` (the whole body was measured by the first, uncut answer)."""
    whole, bad = proxy.body, []
    for at in offsets(whole):
        for how in hows:
            proxy.cut = Cut(at, how)
            status, raw = await again()
            if complete(status, raw):
                bad.append((how, at, whole[:at][-120:], raw[-200:]))
    assert not bad, "\n".join(map(repr, bad))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ingress", STREAMING, ids=lambda i: i.name)
async def test_a_stream_cut_anywhere_never_ends_as_if_complete(cut_gateway: Any, kind: str, ingress: Ingress) -> None:
    proxy, gw = await cut_gateway(kind)
    status, raw = await send(gw, ingress, True, kind)
    assert status == 200 and read_stream(ingress, raw).complete, raw

    def complete(status: int, raw: bytes) -> bool:
        return status == 200 and read_stream(ingress, raw).complete

    await never_complete(proxy, lambda: send(gw, ingress, True, kind), ("reset", "fin", "clean"), complete)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ingress", STREAMING, ids=lambda i: i.name)
async def test_a_whole_answer_cut_anywhere_is_an_error(cut_gateway: Any, kind: str, ingress: Ingress) -> None:
    proxy, gw = await cut_gateway(kind)
    status, raw = await send(gw, ingress, False, kind)
    assert status == 200 and read_whole(status, raw).complete, raw
    await never_complete(
        proxy, lambda: send(gw, ingress, False, kind), ("short", "clean", "eof"), lambda s, _: s == 200
    )


async def test_a_stream_of_two_choices_cut_before_the_second_finished_is_an_error(cut_gateway: Any) -> None:
    """SGP ends its streams with the connection's end, no ``[DONE]``: a body that ends cleanly after
    choice 0 finished, choice 1 still under way, was cut (the fake writes choice 0's chunks first)."""
    proxy, gw = await cut_gateway("sgp")
    ingress = STREAMING[0]
    path, headers, body = ingress.request("m", "hello there friend", True, max_tokens=4, n=2)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200 and read_stream(ingress, (await body_of(resp))[0]).complete
    second = proxy.body.find(b'"index": 1')
    assert second > 0, proxy.body
    proxy.cut = Cut(proxy.body.rfind(b"\n\n", 0, second) + 2, "clean")  # after choice 0 finished
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        status, raw = resp.status, (await body_of(resp))[0]
    assert status != 200 or not read_stream(ingress, raw).complete, raw[-300:]
