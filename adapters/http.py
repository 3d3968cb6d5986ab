"""The IO shell every upstream vendor shares: one pooled aiohttp ``ClientSession`` per target,
per-hop timeouts (connect, first byte, idle between chunks, total) bounded by the request's deadline,
SSE reading, and upstream failures translated into the gateway's error hierarchy at this boundary.

What a vendor's upstream is sent and how its answers read is its ``Wire`` (sans-IO, in
``gateway/dialects/<vendor>/egress.py``); nothing vendor-specific lives here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import aiohttp
import pydantic_core

from adapters import pool
from adapters.failures import (
    MAX_ANSWER_BYTES,
    SHAPE_ERRORS,
    blamed,
    malformed,
    over_budget,
    route_missing,
    too_large,
    unreachable,
    upstream_message,
)
from adapters.watch import StreamIdle, StreamWatch
from gateway.core.errors import (
    GatewayError,
    InvalidRequest,
    UnsupportedFeature,
    UpstreamCredentials,
    UpstreamFailed,
    UpstreamMalformed,
    UpstreamRejected,
)
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Batch, Completion, StreamEvent, Then, Token
from gateway.core.upstream import Call, Identity
from gateway.dialects.base import ChunkReader, Counting, Wire
from gateway.dialects.openai.tokenize import VLLM_TOKENIZE, tokenize_body
from gateway.dialects.sse import Event, SSEParser
from gateway.runtime.config import Server, Target
from gateway.runtime.internals import drain_whole
from gateway.runtime.memory_budget import MemoryBudget
from gateway.runtime.secrets import Secret
from gateway.runtime.timers import Bound, Wheel, on_loop

JSON = Any
PROBE_REQUEST = InternalRequest(Operation.COMPLETION, model="")
# One stream event waiting for its end, at most (a whole answer's bound is ``failures.MAX_ANSWER_BYTES``).
MAX_EVENT_BYTES = 16 * 1024 * 1024
# What only a native path serves (OpenAI's own /v1/responses): a target has it while it has the path.
NATIVE_ONLY = frozenset({Feature.RESPONSES_NATIVE})
# native dialects whose upstream path is the same engine path as the translated chat (vLLM's Messages):
# a stream that may resume takes the chat path, which returns the output's token ids
CHAT_PATHS = frozenset({"anthropic"})
# What a native path may lack and the target's own wire serves (vLLM's /v1/messages opens a new turn
# after a prefill; its chat path continues it): such a request takes the target's own wire
CHAT_ONLY = frozenset({Feature.PREFILL})
DEFAULT_BUDGET = Server().max_buffered_bytes
# A read that is only a keep-alive (an SSE comment, Anthropic's ping) is no progress (``StreamWatch``)
KEEP_ALIVES = (b":", b"event: ping")


async def _body(resp: aiohttp.ClientResponse, name: str, budget: MemoryBudget) -> bytearray:
    """The whole body, up to ``MAX_ANSWER_BYTES`` and within what ``budget`` has left (decompressed: a
    small compressed body may expand without bound, so a compressed one is counted as it comes, like a
    chunked one). Read into one buffer, not joined from parts: the answer is held once, not twice.

    The budget's share is given back on return, and on any exception or cancellation; callers decode
    the body without awaiting before they drop it, so at every await the budget counts each body held.
    """
    length = None if "Content-Encoding" in resp.headers else resp.content_length
    with budget.share() as share:
        if length is not None:  # known: refused before a byte is read, read into its own buffer
            if length > MAX_ANSWER_BYTES:
                raise too_large(name, MAX_ANSWER_BYTES)
            if not share.grow(length):
                raise over_budget(name, f"{length} bytes", budget, share.size)
            buf, pos = bytearray(length), 0
            with memoryview(buf) as view:
                while pos < length and (chunk := await resp.content.readany()):
                    view[pos : pos + len(chunk)] = chunk
                    pos += len(chunk)
            if pos < length:
                raise UpstreamFailed(f"target '{name}' broke off: {pos} of {length} bytes")
            return buf
        buf = bytearray()  # chunked or compressed: counted as it comes
        while chunk := await resp.content.readany():
            if len(buf) + len(chunk) > MAX_ANSWER_BYTES:
                raise too_large(name, MAX_ANSWER_BYTES)
            if not share.grow(len(chunk)):
                raise over_budget(name, f"over {len(buf)} bytes", budget, share.size)
            buf += chunk
        return buf


def _split_first(chunk: bytes) -> tuple[bytes, bytes] | None:
    """A read cut after its first whole event, when more follows it."""
    cut = chunk.find(b"\n\n") + 2
    return (chunk[:cut], chunk[cut:]) if 1 < cut < len(chunk) else None


def _first_apart(chunk: bytes, decoder: ChunkReader) -> tuple[bytes, ...]:
    """A network read, split after the stream's first event when more follows. The first event is
    decoded on its own (the stream's identity), so the rest of the read can be relayed; and its batch,
    ``Then.REST``, may go to the client (with the answer's head) without waiting for the work on
    the rest of a read that may hold the whole answer: the first token reaches the client sooner, and
    the stream's end too (the client reads while the rest is relayed; docs/performance.md). A model's
    first read holds just its first event: no split."""
    if decoder.started:
        return (chunk,)
    return _split_first(chunk) or (chunk,)


class HTTPUpstream(Identity[Target]):
    """One configured target, speaking its vendor's ``Wire``."""

    def __init__(
        self,
        target: Target,
        public_model: str,
        wire: Wire,
        budget: MemoryBudget | None = None,
        secret: Secret | None = None,
        native: Mapping[str, Wire] | None = None,
        counting: Counting | None = None,
    ) -> None:
        self.identify(target, public_model)
        self.counting = counting  # how the target counts a prompt's tokens, when it can
        # The app's budget, shared by every target; one built alone (a test, a probe) gets its own.
        self.budget = budget if budget is not None else MemoryBudget(DEFAULT_BUDGET)
        self.wire = wire
        # A client's own body (``InternalRequest.native``) goes to the upstream's path for its dialect
        # (by ``native_dialect``) while the upstream serves it; the first 404 for that path turns this
        # target's requests of that dialect to ``wire``.
        self.native = dict(native or {})
        features = wire.features | frozenset(Feature(f) for f in target.extra_features)
        features |= NATIVE_ONLY & frozenset().union(*(w.features for w in self.native.values()))
        if target.adapters:
            features |= {Feature.ADAPTER}
        self._features = features
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        # The app's, shared with every target of the same source and re-read on change; one alone otherwise.
        self.secret = secret if secret is not None else Secret.of(target)
        self._wheel: Wheel | None = None  # this target's time bounds, on the loop that serves it
        self._finisher = pool.Finisher()  # streams' body ends read in the background

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Created lazily inside the running loop, once; every request shares its pool.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,
                    ttl_dns_cache=300,
                    enable_cleanup_closed=True,
                    keepalive_timeout=self.target.timeouts.keepalive,
                ),
                timeout=aiohttp.ClientTimeout(total=None, connect=self.target.timeouts.connect),
                auto_decompress=True,
                # Every team's requests share this session: a cookie one answer set (OpenAI's
                # Cloudflare sets two) must not ride along on the next request.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    @property
    def fresh_session(self) -> aiohttp.ClientSession:
        """Never reuses a connection: for the rare retry after a pooled one was found closed."""
        if self._fresh is None:
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                timeout=aiohttp.ClientTimeout(total=None, connect=self.target.timeouts.connect),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._fresh

    async def start(self) -> None:
        """Nothing to start: the connection pool opens on first use."""

    async def close(self) -> None:
        await self._finisher.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._fresh is not None:
            await self._fresh.close()
            self._fresh = None

    def _prepare(self, req: InternalRequest, call: Call) -> tuple[InternalRequest, str]:
        """The adapter, if any, resolved: through the target's table, else natively by the vendor."""
        model = call.model or self.model
        if req.adapter is None:
            return req, model
        mapped = self.target.adapters.get(req.adapter)
        if mapped is not None:
            return dataclasses.replace(req, adapter=None), mapped
        if Feature.ADAPTER in self.wire.features:
            return req, model
        raise InvalidRequest(f"adapter {req.adapter!r} is not served by target '{self.name}'", param="model")

    def wire_for(self, req: InternalRequest) -> Wire:
        """The wire ``req`` goes out in: the native one for a client's own body, while served. Not for
        a Messages stream that may resume: vLLM's /v1/messages is its chat path without the output's
        token ids, and only a continuation from the ids is the unbroken answer token for token."""
        if req.native is None or req.native_dialect is None:
            return self.wire
        if req.resumable and req.native_dialect in CHAT_PATHS:
            return self.wire
        native = self.native.get(req.native_dialect, self.wire)
        return self.wire if req.features & CHAT_ONLY - native.features else native

    async def _post(self, req: InternalRequest, call: Call) -> tuple[aiohttp.ClientResponse, Wire]:
        """Send the request and wait for the response head; the caller bounds the wait (first byte).
        Also the wire it went out in, which reads the answer."""
        req, model = self._prepare(req, call)
        wire = self.wire_for(req)
        resp = await self._post_in(wire, req, call, model)
        if wire is not self.wire and resp.status == 404:
            try:
                raw = await _body(resp, self.name, self.budget)
            finally:
                resp.release()
            if not route_missing(raw):
                message, param = upstream_message(raw)
                raise UpstreamRejected(f"upstream rejected the request: {message}", status=404, param=param)
            self._translate(req)
            wire = self.wire
            resp = await self._post_in(wire, req, call, model)
        return await self._checked(resp, req), wire

    def _translate(self, req: InternalRequest) -> None:
        """The upstream lacks the native path for ``req``'s dialect: paid once, this target's later
        requests of it go translated from the start, and what only that path serves is refused."""
        gone = self.native.pop(req.native_dialect or "", None)
        if gone is not None:
            kept = frozenset().union(*(w.features for w in self.native.values()))
            self._features -= NATIVE_ONLY - kept - self.wire.features
        for feature in NATIVE_ONLY & req.features:
            raise UnsupportedFeature(req.field_name(feature), self.name, "it has no native path for it (404)")

    async def _post_in(self, wire: Wire, req: InternalRequest, call: Call, model: str) -> aiohttp.ClientResponse:
        path = wire.path(req.operation)
        body = wire.encode(req, model)
        url, data = self.target.base_url + path, pydantic_core.to_json(body)
        key = self.secret.value
        if key is None and self.secret.problem is not None:
            raise UpstreamCredentials(f"target '{self.name}' has no usable key ({self.secret.problem})")
        resp = await self._send(url, data, self._headers(key, req, call, wire))
        if resp.status in (401, 403) and self.secret.renewed(key):
            # The key was rotated under us (a Secret mount updated before our poll saw it): once more
            # with the key the source holds now, before the refusal is reported.
            resp.release()
            resp = await self._send(url, data, self._headers(self.secret.value, req, call, wire))
        return resp

    def _headers(self, key: str | None, req: InternalRequest, call: Call, wire: Wire) -> dict[str, str]:
        headers = wire.headers(key, self.target.team, req)
        headers["Content-Type"] = "application/json"
        headers["X-Request-Id"] = call.request_id
        if call.trace:
            headers.update(call.trace)
        return headers

    async def _send(self, url: str, data: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        try:
            # Redirects are not followed: an API's POST is never redirected in normal operation, and
            # aiohttp would carry a vendor's key header (SGP's x-api-key) to wherever one points.
            try:
                resp = await self.session.post(url, data=data, headers=headers, allow_redirects=False)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise
                # A pooled connection the server closed as we sent on it (its keep-alive ran out while
                # this loop was busy): the request never got a hearing. Once more, on a new connection:
                # the pool's other idle ones have idled as long and may be closing too.
                resp = await self.fresh_session.post(url, data=data, headers=headers, allow_redirects=False)
        except aiohttp.ClientError as exc:
            raise unreachable(self.name, self.target, exc) from None
        return resp

    async def _checked(self, resp: aiohttp.ClientResponse, req: InternalRequest) -> aiohttp.ClientResponse:
        """``resp`` if it is an answer; its failure translated into our errors otherwise."""
        if 300 <= resp.status < 400:
            resp.release()
            raise UpstreamFailed(
                f"target '{self.name}' answered with a redirect (HTTP {resp.status}), which the gateway does "
                "not follow: point its base_url at the new address"
            )
        if resp.status >= 400:
            try:
                raw = await _body(resp, self.name, self.budget)
            finally:
                resp.release()
            message, param = upstream_message(raw)
            if resp.status in (401, 403):
                # The upstream refused the gateway's own credentials: a deployment fault, not the client's.
                raise UpstreamCredentials(
                    f"target '{self.name}' refused the gateway's credentials (HTTP {resp.status})"
                )
            if resp.status < 500 and resp.status != 408:
                param = blamed(param, req)
                err = UpstreamRejected(f"upstream rejected the request: {message}", status=resp.status, param=param)
                retry_after = resp.headers.get("Retry-After")
                if retry_after is not None and retry_after.replace(".", "", 1).isdigit():
                    err.retry_after = float(retry_after)  # type: ignore[attr-defined]
                raise err
            raise UpstreamFailed(f"target '{self.name}' failed with HTTP {resp.status}: {message}")
        return resp

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        # One bound for the exchange: the first-byte bound until the head arrives, then moved to the
        # total bound for the body.
        headers_in = False
        try:
            self._wheel = wheel = on_loop(self._wheel)
            with Bound(call.hop(self.target.timeouts.first_byte), wheel) as bound:
                resp, wire = await self._post(request, call)
                headers_in = True
                bound.reschedule(call.hop(self.target.timeouts.total))
                try:
                    raw = await _body(resp, self.name, self.budget)
                finally:
                    resp.release()
        except TimeoutError:
            raise call.timed_out(
                self.name, "answer not complete in time" if headers_in else "no response headers in time"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(f"target '{self.name}' broke off: {type(exc).__name__}") from None
        try:
            data = pydantic_core.from_json(raw)
        except ValueError:
            raise UpstreamFailed(f"target '{self.name}' answered with invalid JSON") from None
        try:
            return wire.decode(data, request)
        except SHAPE_ERRORS as exc:
            raise malformed(self.name, exc) from None

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        """The answer's events, a batch per network read, read one of three ways: a token's event in
        the last one's shape relayed as read (``Token``); a read of whole events relayed whole (one
        ``Frame``); any other read parsed and decoded (``_batches``)."""
        first_byte = call.hop(self.target.timeouts.first_byte)
        self._wheel = wheel = on_loop(self._wheel)
        watch = StreamWatch(first_byte, self.target.timeouts.idle, call.remaining(), wheel)
        try:
            with watch:
                resp, wire = await self._post(request, call)
        except TimeoutError:
            raise call.timed_out(self.name, "no response headers in time") from None
        drain_whole(resp.content)
        watch.reading(resp.content, self.target.timeouts.total)
        parser, decoder = SSEParser(), wire.reader(request)
        relaying = decoder.relaying  # set for the stream: not asked again per read
        read, same_shape = resp.content.readany, decoder.same_shape
        fast = relaying  # and the parser holds nothing of an event: a read may be a token's whole event
        ended = False
        try:
            while True:
                chunk = await self._next_read(watch, read, call)
                if fast and same_shape(chunk):  # a model server writes one event per read
                    watch.moved = True
                    yield Batch([Token(chunk)])
                    continue
                if relaying and chunk[-2:] == b"\n\n" and parser.idle:
                    run = decoder.relay_run(chunk)  # whole events: no splitting or batching
                    if run is not None and run[1] == len(chunk):
                        watch.moved = watch.moved or not chunk.startswith(KEEP_ALIVES)
                        yield Batch([run[0]])
                        continue
                for batch in self._batches(chunk, parser, decoder, resp, wire.done_sentinel):
                    ended = batch.then is Then.END
                    if batch.events:
                        watch.moved = watch.moved or not chunk.startswith(KEEP_ALIVES)
                        yield batch
                if ended:
                    return
                fast = relaying and parser.idle
        finally:
            watch.cancel()
            if ended:
                self._finisher.finish(resp)
            else:
                # Closing (not releasing) drops the connection, which is how vLLM learns to abort.
                resp.close()
                call.progress.usage = decoder.usage  # what a stream cut short is settled by, if any

    async def _next_read(self, watch: StreamWatch, read: Callable[[], Awaitable[bytes]], call: Call) -> bytes:
        """The body's next read (``b""`` at its end), bounded by the stream's idle timeout."""
        watch.since = watch.loop.time()
        try:
            chunk = await read()
        except StreamIdle as exc:
            raise call.timed_out(self.name, str(exc)) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(f"target '{self.name}' broke off the stream: {type(exc).__name__}") from None
        watch.since = None
        return chunk

    def _batches(
        self, chunk: bytes, parser: SSEParser, decoder: ChunkReader, resp: aiohttp.ClientResponse, sentinel: bool
    ) -> Iterator[Batch]:
        """One read parsed and decoded (``b""``: the body's end): its batches, the last ``Then.END``
        when the stream's end was seen. What arrived before a failure still comes, then the error."""
        pieces = _first_apart(chunk, decoder)
        for i, piece in enumerate(pieces):
            batch: list[StreamEvent] = []
            try:
                if piece:
                    done = self._take(piece, parser, decoder, batch, sentinel)
                elif not (done := self._read(parser.close(), decoder, batch, sentinel)):
                    # Where the wire ends its streams with [DONE], a body that ended without it was cut,
                    # even after a finish (vLLM's and OpenAI's usage chunk comes after the finish); a
                    # stream whose wire has no terminator (SGP) is complete once its choices finished.
                    if sentinel or not decoder.finished or resp.content.exception() is not None:
                        raise UpstreamFailed(f"target '{self.name}' ended the stream early")
                    batch += decoder.finish()
                    done = True
            except SHAPE_ERRORS as exc:
                if batch:
                    yield Batch(batch)
                raise malformed(self.name, exc) from None
            except GatewayError:
                if batch:
                    yield Batch(batch)
                raise
            if done:
                yield Batch(batch, Then.END)
                return
            if batch:
                yield Batch(batch, Then.REST if i < len(pieces) - 1 else Then.MORE)

    def _take(
        self,
        chunk: bytes,
        parser: SSEParser,
        decoder: ChunkReader,
        batch: list[StreamEvent],
        sentinel: bool | None = None,
    ) -> bool:
        """One network read into ``batch``; True when the stream's end was seen. Relaying, the chunks
        the read opens with go out as one frame (once the stream's first event, its identity, has
        been decoded: ``_first_apart`` gives it a read of its own), and only the rest is parsed."""
        if decoder.relaying and parser.idle:
            run = decoder.relay_run(chunk)
            if run is not None:
                batch.append(run[0])
                chunk = chunk[run[1] :]
        if not chunk:
            return False
        done = self._read(parser.feed(chunk), decoder, batch, sentinel)
        if parser.pending > MAX_EVENT_BYTES:
            raise UpstreamFailed(f"target '{self.name}' sent a stream event of more than {MAX_EVENT_BYTES} bytes")
        return done

    def _read(
        self, events: list[Event], decoder: ChunkReader, batch: list[StreamEvent], sentinel: bool | None = None
    ) -> bool:
        """Decode one network read's events into ``batch``; True when the stream's end was seen.
        ``sentinel``: the stream's wire ends with ``[DONE]`` (default: the target's own wire's)."""
        if sentinel is None:
            sentinel = self.wire.done_sentinel
        relaying = decoder.relaying  # most decoded streams never relay: no call per chunk to learn it
        for event in events:
            data = event.data
            if event.event is None and relaying:
                frame = decoder.relay(data)
                if frame is not None:
                    batch.append(frame)
                    continue
            elif event.event == "error":
                raise UpstreamFailed(f"target '{self.name}' stream error: {data[:300].decode('utf-8', 'replace')}")
            if data == b"[DONE]" and sentinel:
                if not decoder.finished:
                    # An in-band error in a shape no reader names (Friendli's ``{"message"}``, OctoAI's
                    # ``{"object": "error"}``), then ``[DONE]``: a stream without a finish broke off.
                    raise UpstreamFailed(f"target '{self.name}' ended the stream without a finish")
                batch += decoder.finish()
                return True
            batch += decoder.decode(self._chunk(data))
        return False

    def _chunk(self, data: bytes) -> JSON:
        try:
            return pydantic_core.from_json(data)
        except ValueError:
            pass
        try:  # a stray invalid UTF-8 byte in a text is replaced, as a text decoder would
            return pydantic_core.from_json(data.decode("utf-8", errors="replace"))
        except ValueError:
            raise UpstreamFailed(f"target '{self.name}' sent an invalid stream chunk") from None

    def replay(self, request: InternalRequest) -> Callable[[list[bytes]], list[StreamEvent]]:
        """A reader of the chunks this target's stream relayed as they came, batch after batch, read
        back as events: what the client has of a stream that broke (``gateway/routing/resume.py``).
        One reader for the stream: an Anthropic stream's events mean nothing without its first. The
        wire's reader relays nothing here, a client's own body's (``native``) included."""
        wire = self.wire_for(request)
        decoder = wire.reader(dataclasses.replace(request, relay=None, native=None, native_dialect=None))
        parser = SSEParser()

        def read(relayed: list[bytes]) -> list[StreamEvent]:
            events: list[StreamEvent] = []
            for raw in relayed:
                for event in parser.feed(raw):
                    if event.data != b"[DONE]":
                        events += decoder.decode(self._chunk(event.data))
            return events

        return read

    async def prompt_ids(self, request: InternalRequest, call: Call) -> list[int]:
        """A prompt's token ids, from the server's ``/tokenize`` (vLLM's): a completion's with special
        tokens added, as to a text prompt; a chat's messages through its chat template, with the
        generation prompt. A resumed answer continues from them and its output's ids."""
        req, model = self._prepare(request, call)
        url = VLLM_TOKENIZE.url(self.target.base_url, self.wire)
        data = await self._ask(url, tokenize_body(req, self.wire, model), req, call, "/tokenize")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise UpstreamMalformed(f"target '{self.name}': /tokenize answered without token ids")
        return tokens

    async def count_tokens(self, request: InternalRequest, call: Call) -> int | None:
        """The prompt's size as the target counts it itself (``counting``: Anthropic's count_tokens,
        vLLM's /tokenize); None for a target that cannot say."""
        if self.counting is None:
            return None
        req, model = self._prepare(request, call)
        url = self.counting.url(self.target.base_url, self.wire)
        data = await self._ask(url, self.counting.body(req, self.wire, model), req, call, "the token count")
        count = self.counting.read(data)
        if count is None:
            raise UpstreamMalformed(f"target '{self.name}': its token count answered without a count")
        return count

    async def _ask(self, url: str, body: JSON, req: InternalRequest, call: Call, what: str) -> JSON:
        """One small JSON question beside the generation path, in the first byte's bound; any failure
        is ``UpstreamFailed`` naming ``what``."""
        try:
            async with asyncio.timeout(call.hop(self.target.timeouts.first_byte)):
                headers = self._headers(self.secret.value, req, call, self.wire)
                async with self.session.post(url, json=body, headers=headers, allow_redirects=False) as resp:
                    if resp.status != 200:
                        raise UpstreamFailed(f"target '{self.name}': {what} answered {resp.status}")
                    return await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise UpstreamFailed(f"target '{self.name}': {what} failed ({type(exc).__name__})") from None

    async def list_models(self) -> list[str]:
        try:
            headers = self.wire.headers(self.secret.value, self.target.team, PROBE_REQUEST)
            async with self.session.get(
                # the list beside the generation path: /v1/completions → /v1/models, /v1/messages too
                self.target.base_url + self.wire.path(Operation.COMPLETION).rsplit("/", 1)[0] + "/models",
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=3),
                allow_redirects=False,  # the probe carries the wire's key headers too
            ) as resp:
                if resp.status != 200:
                    raise UpstreamFailed(f"target '{self.name}': /models answered {resp.status}")
                data = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise unreachable(self.name, self.target, exc) from None
        return [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]
