"""The one fake upstream of the tests and the benchmarks: a deterministic model (``model``) answering in
each vendor's wire format (``wire/``: vLLM, OpenAI, Friendli today and 2024, SGP v5 and v4 beta, OctoAI),
with fault markers (``faults``) and two front ends: the aiohttp server the tests start (``server``,
recording every request) and the fast, cached one the overhead benchmark measures against (``fast``).

The "vllm" kind follows vLLM's OpenAI-compatible server (``shared/reference/vllm.md`` §3): its shapes,
``return_token_ids``, logprobs, 400/404 wording (``bodies``), and its habit of ignoring unknown fields
(the removed ``guided_*`` among them), which stay visible in ``.requests`` so tests can assert the gateway
never sends them. Every kind reads its body with the same checks after mapping its vendor's field names.

``.cancelled`` counts generation requests whose client hung up before the answer was complete (mid
stream, or during a hang); ``.active`` counts generation requests in flight; ``.sent`` holds the last
stream's events as written. ``python -m tests.fakes.upstream`` serves one.

What does not belong here: anything of the gateway's own; this package imports nothing from it.
"""

from tests.fakes.upstream.model import EOS_ID, NATURAL_LENGTH, VOCAB, expected, token_id, tokenize
from tests.fakes.upstream.server import STATE, RecordedRequest, Upstream, UpstreamState, create_app, start
from tests.fakes.upstream.wire import WIRES

KINDS = tuple(WIRES)

__all__ = [
    "EOS_ID",
    "KINDS",
    "NATURAL_LENGTH",
    "STATE",
    "VOCAB",
    "RecordedRequest",
    "Upstream",
    "UpstreamState",
    "create_app",
    "expected",
    "start",
    "token_id",
    "tokenize",
]
