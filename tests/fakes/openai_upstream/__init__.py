"""A fake OpenAI-compatible upstream that answers like vLLM (0.32+), for the gateway's tests.

The gateway's "openai" adapter is pointed at it (base URL ``http://127.0.0.1:PORT/v1``). It follows
vLLM's wire format (``shared/reference/vllm.md`` §3, ``shared/dialects.md`` §1): response and chunk
shapes, ``[DONE]``, the usage chunk, ``return_token_ids``, legacy and chat logprobs, vLLM's 400/404
envelope and wording, and vLLM's habit of silently ignoring unknown fields (the removed ``guided_*``
among them), which stay visible in ``.requests`` so tests can assert the gateway never sends them.

The "model" is deterministic. A token is a word with its leading whitespace; its id is
``crc32(word) % 32000``. The answer is a pseudo-random sequence of words from ``VOCAB`` seeded by
(prompt text, ``seed``, choice index); after ``NATURAL_LENGTH`` words the model emits EOS (id 2,
``</s>``), which, as in vLLM, counts as a completion token and appears in ``token_ids`` but not in
the text.

Faults are asked for by a marker in the prompt (any string of a batch) or in the last chat message, so
they work through the gateway from any client; several markers combine:

* ``[[fault:status=500]]`` (any status) answers that status with the error envelope;
  ``[[fault:status=429,retry_after=2]]`` adds ``Retry-After: 2``.
* ``[[fault:reset_before]]`` drops the TCP connection before any header is sent.
* ``[[fault:reset_after=3]]`` streams three token chunks, then drops the connection (no ``[DONE]``);
  on a non-streaming request it drops the connection instead of answering.
* ``[[fault:error_after=2]]`` streams two token chunks, then vLLM's in-stream error event
  (``data: {"error": {...}}`` after the 200) and ``[DONE]``.
* ``[[fault:hang_before=S]]`` waits S seconds before answering.
* ``[[fault:hang_between=S]]`` and ``[[fault:slow=S]]`` (the same delay) wait S seconds before every
  stream event after the first, ``[DONE]`` included; a non-streaming answer waits S per token.
* ``[[fault:once:...]]`` applies only to the first request carrying that exact marker text, so a
  retry succeeds; add ``id=x`` to tell two otherwise equal markers apart.

``.cancelled`` counts generation requests whose client hung up before the answer was complete (mid
stream, or during a hang); ``.active`` counts generation requests in flight.

Modules: ``common`` (constants, tokenizer, error envelope), ``bodies`` (request bodies and vLLM's checks),
``engine`` (generation and jobs), ``render`` (bodies and chunks), ``server`` (faults, the app, starting
it); ``python -m tests.fakes.openai_upstream`` serves one.

What does not belong here: other vendors' dialects (``tests/upstreams/vendors.py``) and anything
of the gateway's own; this package imports nothing from the gateway.
"""

from tests.fakes.openai_upstream.common import EOS_ID, NATURAL_LENGTH, VOCAB, token_id, tokenize
from tests.fakes.openai_upstream.server import STATE, FakeUpstream, UpstreamState, create_app, start_upstream

__all__ = [
    "EOS_ID",
    "NATURAL_LENGTH",
    "STATE",
    "VOCAB",
    "FakeUpstream",
    "UpstreamState",
    "create_app",
    "start_upstream",
    "token_id",
    "tokenize",
]
