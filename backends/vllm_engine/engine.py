"""The ``vllm-engine`` upstream: vLLM's ``AsyncLLM`` running inside the gateway's process.

``start()`` builds the engine once, inside the running loop (vLLM's own server does the same: the
constructor blocks while its EngineCore process starts and loads the model, before the gateway
listens). Requests are prepared as ``vllm serve`` prepares them (``inputs.py``) and read back as the
HTTP provider reads the server's answers (``outputs.py``), so the provider honours what ``vllm``
does, plus token-id prompts and Friendli's embedding replacement.

Each prompt is one engine request, id ``<request id>.<n>-<prompt>`` (a client's ``X-Request-Id``
may repeat, and per-seed fan-out shares one call). Closing a stream, a client's hang-up or an
expired deadline aborts the engine requests. Errors are translated here, at the boundary: vLLM's
validation (pydantic, ``VLLMValidationError``, ``ValueError``) is the client's ``InvalidRequest``; a
full queue or a dead engine is ``UpstreamFailed``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pydantic
from vllm import AsyncEngineArgs
from vllm.entrypoints.generate.beam_search.online import BeamSearchOnlineMixin
from vllm.entrypoints.serve.utils.fingerprint import get_system_fingerprint
from vllm.exceptions import GracefulHTTPError, VLLMClientError, VLLMError
from vllm.utils.async_utils import merge_async_iterators
from vllm.v1.engine.async_llm import AsyncLLM

from backends.vllm_engine.inputs import Job, Preparer
from backends.vllm_engine.outputs import Reader
from gateway.core.errors import (
    GatewayError,
    InvalidRequest,
    UpstreamFailed,
)
from gateway.core.request import Feature, InternalRequest
from gateway.core.response import Accumulator, Batch, Completion, StreamEvent, StreamStart, Then, UsageReport
from gateway.core.upstream import Call, Identity
from gateway.dialects.openai.egress import VLLM_WIRE
from gateway.dialects.refusals import invalid_from
from gateway.runtime.config import ConfigError, Target

log = logging.getLogger("gateway.vllm_engine")


def client_fault(exc: BaseException | None) -> bool:
    """Raw exceptions vLLM's server answers with 400 (``entrypoints/serve/exception_handling``):
    ``ValueError``, ``TypeError``, ``OverflowError`` and jinja2's ``TemplateError`` (found by name)."""
    if isinstance(exc, ValueError | TypeError | OverflowError):
        return True
    return exc is not None and any(c.__name__ == "TemplateError" for c in type(exc).__mro__)


class BeamSearcher(BeamSearchOnlineMixin):  # type: ignore[misc]  # vLLM ships no types here
    """vLLM's own beam search driver (what ``vllm serve`` runs for ``use_beam_search``): repeated
    one-token generations on the engine, kept to the best beams."""

    def __init__(self, engine: Any) -> None:
        self.engine_client = engine
        self.renderer = engine.renderer


class VLLMEngine(Identity[Target]):
    def __init__(self, target: Target, public_model: str) -> None:
        args = dict(target.engine or {})
        if not args.get("model"):
            raise ConfigError("provider 'vllm-engine': 'engine.model' (a path or hub id) is required")
        self.identify(target, public_model)  # its model: the served name, as vllm serve's --served-model-name
        self._args = {"served_model_name": self.model, **args}
        features = VLLM_WIRE.features | {Feature.TOKEN_PROMPT} | {Feature(f) for f in target.extra_features}
        if args.get("enable_prompt_embeds"):
            features |= {Feature.EMBEDDING_REPLACEMENT}
        self._features = frozenset(features)
        self._engine: Any = None
        self._prep: Preparer | None = None
        self._beams: BeamSearcher | None = None
        self._fingerprint: str | None = None
        self._ids = itertools.count()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._engine is not None:
            return
        try:
            engine_args = AsyncEngineArgs(**self._args)
        except TypeError as exc:
            raise ConfigError(f"target '{self.name}': engine: {exc}") from None
        log.info("target %s: starting the vLLM engine (%s)", self.name, self._args["model"])
        began = time.monotonic()
        self._engine = AsyncLLM.from_engine_args(engine_args)
        self._prep = Preparer(self._engine)
        self._beams = BeamSearcher(self._engine)
        try:
            self._fingerprint = get_system_fingerprint(self._engine.vllm_config)
        except Exception:  # as vLLM's server: never fail start-up over the fingerprint
            self._fingerprint = None
        log.info("target %s: engine ready in %.1f s", self.name, time.monotonic() - began)

    async def close(self) -> None:
        engine, self._engine, self._prep = self._engine, None, None
        if engine is not None:
            engine.shutdown()

    async def list_models(self) -> list[str]:
        if self._engine is None or self._engine.errored:
            raise UpstreamFailed(f"target '{self.name}': the engine is not running")
        return [self.model]

    # -- serving ---------------------------------------------------------------------------------

    async def _prepare(self, request: InternalRequest) -> Job:
        if self._prep is None:
            raise UpstreamFailed(f"target '{self.name}': the engine is not running")
        try:
            return await self._prep.prepare(request, self.model)
        except Exception as exc:
            raise self._translate(exc) from None

    def _translate(self, exc: BaseException) -> GatewayError:
        """vLLM's exceptions as ours, split as vLLM's server splits them into 4xx and 5xx."""
        if isinstance(exc, GatewayError):
            return exc
        if self._engine is not None and self._engine.errored:
            return UpstreamFailed(f"target '{self.name}': the engine died")
        if isinstance(exc, pydantic.ValidationError):  # vLLM's request models refused the body
            return invalid_from(exc)
        if isinstance(exc, GracefulHTTPError):  # admission control: a full queue (503)
            return UpstreamFailed(f"target '{self.name}': {exc}")
        if isinstance(exc, VLLMClientError):
            return InvalidRequest(str(exc), param=getattr(exc, "parameter", None))
        cause = exc.__cause__ if isinstance(exc, VLLMError) else exc  # EngineGenerateError wraps input errors
        if client_fault(cause):
            return InvalidRequest(str(cause))
        return UpstreamFailed(f"target '{self.name}' failed: {type(exc).__name__}: {exc}")

    async def _outputs(self, job: Job, call: Call) -> AsyncGenerator[tuple[int, Any], None]:
        """(prompt index, output) as the engine makes them; closing this generator early, or
        cancelling a read, aborts every request of the job."""
        engine = self._engine
        base = f"{call.request_id}.{next(self._ids)}"
        ids = [f"{base}-{i}" for i in range(len(job.inputs))]
        merged = merge_async_iterators(
            *(
                self._generate(job, inp, params, rid)
                for inp, params, rid in zip(job.inputs, job.params, ids, strict=True)
            )
        )
        finished = False
        try:
            while True:
                try:
                    item = await anext(merged)
                except StopAsyncIteration:
                    finished = True
                    return
                except Exception as exc:
                    raise self._translate(exc) from None
                yield item
        finally:
            await merged.aclose()  # vLLM's generate() aborts its request when closed or cancelled
            if not finished and not engine.errored:
                await engine.abort(ids)  # and once more by id, for requests not started yet

    def _generate(self, job: Job, engine_input: Any, params: Any, request_id: str) -> AsyncGenerator[Any, None]:
        if job.beam and self._beams is not None:  # Friendli 2024 beam search, as vllm serve runs it
            return cast(AsyncGenerator[Any, None], self._beams.beam_search(engine_input, request_id, params))
        return cast(AsyncGenerator[Any, None], self._engine.generate(engine_input, params, request_id))

    def _start(self, job: Job, call: Call) -> StreamStart:
        prefix = "chatcmpl" if job.chat else "cmpl"  # vLLM's ids: <prefix>-<X-Request-Id>
        return StreamStart(f"{prefix}-{call.request_id}", int(time.time()), self.model)

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        job = await self._prepare(request)
        reader = Reader(job, self._engine.renderer.tokenizer)
        acc = Accumulator(start=self._start(job, call))
        outputs = self._outputs(job, call)
        try:
            async with asyncio.timeout(call.hop(self.target.timeouts.total)):
                async for i, out in outputs:
                    acc.extend(reader.read(i, out))
        except TimeoutError:
            raise call.timed_out(self.name, "answer not complete in time") from None
        finally:
            await outputs.aclose()
        acc.add(UsageReport(reader.usage()))
        completion = acc.completion()
        completion.system_fingerprint = self._fingerprint
        if job.beam:  # vLLM's beams, best first: the best is the answer (as the HTTP provider decodes)
            completion.choices = [c for c in completion.choices if c.index == 0]
        return completion

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        job = await self._prepare(request)
        reader = Reader(job, self._engine.renderer.tokenizer)
        # The start goes out with the first output, so that what vLLM refuses on admission is still
        # an error before the first byte.
        batch: list[StreamEvent] = [self._start(job, call)]
        outputs = self._outputs(job, call)
        try:
            while True:
                try:
                    async with asyncio.timeout(call.hop(self.target.timeouts.idle)):
                        i, out = await anext(outputs)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise call.timed_out(self.name, "no output for too long") from None
                batch += reader.read(i, out)
                if batch:
                    yield Batch(batch)
                    batch = []
            yield Batch([*batch, UsageReport(reader.usage())], Then.END)  # the answer ends in the same send
        finally:
            call.progress.usage = reader.usage()  # exact as of the last output: a cut stream's settlement
            await outputs.aclose()
