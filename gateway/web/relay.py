"""The relay seam: a stream's batches written to the client in its dialect, in as few sends as the
batches allow. The one place that reads a batch's ``then`` and the one fast path of a lone ``Token``:

- the first events of a read cut after them (``Then.REST``) wait for the rest of their read under
  load (one send, not two), and go at once for a lone request (the first token sooner);
- the stream's last batch (``Then.END``) is not written here but left for the answer's end, so that
  the events and the stream's end leave in one write;
- a batch that is one relayed ``Token`` (most of a model server's stream) is counted and written
  without the per-batch bookkeeping;
- a stream that may resume (``gateway.routing.resume.Resumable``) is read here, its target's stream
  directly: each batch written is kept, and a break is handed to it for the continuation.

Everything else of a stream, upstream to encoder, exchanges typed events (``gateway.core.response``);
this module decides only when the encoded bytes are sent (docs/performance.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.core.response import Batch, Then, Token
from gateway.dialects.base import StreamEncoder
from gateway.routing.resume import KEEP_BATCHES, Resumable
from gateway.web.record import RequestLog


class Relay:
    """Writes one stream's batches; ``out`` is what is encoded and not yet written when ``run``
    returns or raises: the caller ends the answer with it (``out + encoder.end()`` or ``.error()``)."""

    __slots__ = ("encoder", "log", "out", "resp")

    def __init__(self, resp: web.StreamResponse, encoder: StreamEncoder, log: RequestLog) -> None:
        self.resp, self.encoder, self.log = resp, encoder, log
        self.out = b""

    async def run(self, first: Batch, events: AsyncIterator[Batch], busy: Callable[[], bool]) -> None:
        """``first`` (already counted by the caller's log) and the rest of ``events``, up to the last
        batch, which is left in ``out`` with nothing after it written. A stream that may resume
        (``Resumable``) is read here, not through a layer of its own: each batch written is kept, and
        a break is handed to its ``recover``, whose continuation is read on."""
        encode = self.encoder.event
        self.out = b"".join([encode(ev) for ev in first.events])
        if first.then is Then.END:
            return
        if not (first.then is Then.REST and busy()):
            await self.resp.write(self.out)  # the head goes with it (alone, if the first events wrote nothing)
            self.out = b""
        if not isinstance(events, Resumable):
            await self.relay(events, None)
            return
        while True:
            try:
                await self.relay(events.current, events)
                return
            except GatewayError as err:
                if not self.encoder.continuable:
                    raise  # the client's stream cannot take a continuation here: it ends with the error
                head = await events.recover(err)  # or ``err`` again: the stream ends with it
            self.log.observe(head.events)
            self.out += b"".join([encode(ev) for ev in head.events])
            if head.then is Then.END:
                return
            if self.out:
                await self.resp.write(self.out)
                self.out = b""

    async def relay(self, events: AsyncIterator[Batch], resumable: Resumable | None) -> None:
        """``events`` written up to their last batch, which is left in ``out``; each batch kept by
        ``resumable`` if it may resume."""
        encode, write, out = self.encoder.event, self.resp.write, self.out
        kept = [] if resumable is None else resumable.kept
        try:
            async for batch in events:
                if resumable is not None:
                    kept.append(batch)
                    if len(kept) >= KEEP_BATCHES:
                        resumable.fold()
                got = batch.events
                if len(got) == 1 and type(token := got[0]) is Token:
                    self.log.token(len(token.data))
                    await write(out + encode(token))
                    out = b""
                    continue
                self.log.observe(got)
                # most batches of a model server's stream are one token's event
                out += encode(got[0]) if len(got) == 1 else b"".join([encode(ev) for ev in got])
                if batch.then is Then.END:
                    return  # written with the stream's end
                if out:
                    await write(out)
                    out = b""
        finally:
            self.out = out
