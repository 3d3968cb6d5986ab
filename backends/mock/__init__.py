"""The built-in ``mock`` provider: a model that needs nothing installed, for a first answer, demos,
tests and load tests of the gateway itself. Configure it as any target, with no address:

    models:
      - name: demo
        targets: [{provider: mock, engine: {tokens_per_second: 20}}]

It answers completions and chats in plain English words, the same text for the same prompt, seed
and choice index (``text.py``); streams at ``tokens_per_second`` (default 20; 0 streams at once);
counts usage with a documented tokenizer (``text.py``): prompt tokens from the prompt's text,
completion tokens = the tokens it generated. It honours ``max_tokens`` (finish ``length``), ``n``,
batched and token-id prompts, ``stop`` (finish ``stop``), ``include_stop_str_in_output``,
``min_tokens``, ``ignore_eos`` and seeds; tools, Anthropic's thinking and effort (``tools.py``: a
chat offered tools answers in text unless a call is forced or the last user turn says
``[mock-tool NAME]``, so Claude Code and agent SDKs run on it); any other feature is refused by name,
as for every target.

**Errors on demand**: a prompt (or any chat message) containing ``[mock-error STATUS]`` fails with
that HTTP status before the first byte: 4xx as the upstream's rejection (429 is retryable), 504 as an
upstream timeout, any other as an upstream failure (502, retryable; repeated, it cools the target).
``[mock-error STATUS after N]`` streams N tokens first, then fails in-band (a whole answer fails
outright).

Registered in ``backends.ENGINES`` (in-process providers), so it goes through the whole pipeline:
auth, limits, routing, usage, metrics and every dialect's rendering.
"""

from backends.mock.engine import MockEngine

__all__ = ["MockEngine"]
