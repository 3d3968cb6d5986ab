"""Each vendor's wire format, one module each, drawn from the same jobs; ``WIRES`` is the registry the
servers look a kind up in. Faithful to the vendors (``shared/dialects.md``), never to the gateway's
own codecs: nothing here imports the gateway."""

from typing import Final

from tests.fakes.upstream.wire import anthropic, friendli, octoai, openai, sgp, vllm
from tests.fakes.upstream.wire.base import Chunk, Wire

WIRES: Final = {
    w.name: w
    for w in (
        vllm.WIRE,
        openai.WIRE,
        friendli.WIRE,
        friendli.WIRE_2024,
        sgp.WIRE,
        sgp.WIRE_V4,
        octoai.WIRE,
        anthropic.WIRE,
    )
}

__all__ = ["WIRES", "Chunk", "Wire"]
