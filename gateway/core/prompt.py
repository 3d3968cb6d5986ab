"""An upper bound on the tokens a request's prompt can take: what a hard budget reserves before the
request runs, so that no prompt can cost more than was reserved.

The bound is a property of the internal request alone: a dialect gets it by putting every piece of
text its client sent into the ``InternalRequest`` (a new field that carries prompt text is added to
``COUNTED`` and counted in ``bound``; one that carries none goes to ``NOT_PROMPT``;
``tests/unit/test_prompt_bound.py`` fails on a field in neither).

Why bytes: every tokenizer we know spends at least one UTF-8 byte per token. Byte-level BPE (GPT-2,
Llama 3, tiktoken's encodings) splits text into bytes and only ever merges them; SentencePiece with
byte fallback (Llama 2) emits a piece or a byte per byte, plus at most one ``▁`` it puts before a
piece of text. So a text of ``b`` bytes takes at most ``b + 1`` tokens. On top of the text: the chat
template's markers around each message (``MESSAGE_TOKENS``), the request's own (BOS, the generation
prompt, a template's preamble: ``CHAT_TOKENS``), a template's tool instructions (``TOOLS_TOKENS``),
JSON (tool definitions and calls, parts other than text, fields passed through) counted twice its
compact text (a template may indent it), and ``IMAGE_TOKENS`` per image. A tokenizer or template
that spends more (a model counting more tokens per image, a template with a longer preamble) can go
past the bound by that much; docs/spend.md states the trade-off against ordinary text, where a token
is about four bytes. The gateway loads no tokenizer: for any model this is the stated factor, which
holds for every tokenizer whose tokens each cover a byte of the text, and not where a normalizer
lengthens it (NFKC).

The same factor bounds what a stream carried (``relayed_tokens``, ``delta_tokens``): a stream cut
before its usage came is settled by it where the upstream counted nothing as it went.

What does not belong here: the completion's worst case (``max_tokens``, the limits' planning).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.request import (
    ChatMessage,
    ChatOptions,
    InternalRequest,
    Operation,
    PromptItem,
    Sampling,
    StructuredOutput,
)
from gateway.core.response import Completion, Delta

MESSAGE_TOKENS = 8  # a template's markers around one message (its role name is counted as text)
CHAT_TOKENS = 64  # BOS, the generation prompt, a template's own preamble (a date, a default system line)
TOOLS_TOKENS = 256  # a template's instructions when tools are offered
IMAGE_TOKENS = 4096  # one image: above OpenAI's (1,105 at high detail) and Anthropic's (about 1,600)
JSON_FACTOR = 2  # a template may render JSON indented: a line's indentation per item
IMAGE_PARTS = frozenset({"image_url", "image", "input_image"})  # OpenAI chat, Anthropic, OpenAI Responses
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})

# The fields of the request's types, by whether an upstream may put what they hold into the prompt.
# ``sampling`` is counted for its ``suffix`` (the text after the insertion) and ``structured`` (a
# schema some upstreams describe in the prompt); its other fields steer generation only.
COUNTED: dict[type, frozenset[str]] = {
    InternalRequest: frozenset({"prompts", "messages", "chat", "extra_body", "sampling", "native", "chain"}),
    ChatMessage: frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning"}),
    ChatOptions: frozenset({"tools", "tool_choice", "reasoning"}),
    Sampling: frozenset({"suffix", "structured"}),
}
NOT_PROMPT: dict[type, frozenset[str]] = {
    InternalRequest: frozenset(
        [
            "operation",
            "model",
            "stream",
            "stream_usage",
            "adapter",
            "embedding_replacement",
            "timeout",
            "user",
            "extra_headers",
            "anthropic_beta",
            "native_dialect",
            "want_token_ids",
            "want_seed",
            "seed_drawn",
            "relay",
            "resumable",
            "features",
            "fields",
            "reasons",
            "embedding",  # an embedding's dimensions and encoding; its inputs are ``prompts``
            "reply",  # what the client's dialect echoes in its answer; never sent upstream
        ]
    ),
    ChatMessage: frozenset(),
    ChatOptions: frozenset({"parallel_tool_calls"}),
    Sampling: frozenset(
        [
            "max_tokens",
            "max_total_tokens",
            "min_tokens",
            "min_total_tokens",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "xtc_threshold",
            "xtc_probability",
            "n",
            "best_of",
            "seeds",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "no_repeat_ngram",
            "encoder_repetition_penalty",
            "encoder_no_repeat_ngram",
            "logit_bias",
            "stop",
            "stop_token_sequences",
            "eos_token_ids",
            "include_stop_str_in_output",
            "ignore_eos",
            "bad_words",
            "bad_word_tokens",
            "logprobs",
            "prompt_logprobs",
            "echo",
            "forced_output_tokens",
            "beam",
            "output_logits",
        ]
    ),
}


def text_tokens(text: str) -> int:
    """The most tokens ``text`` can take: its UTF-8 bytes, and one a tokenizer may put before it."""
    return (len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))) + 1


def json_tokens(value: Any) -> int:
    """The most tokens a JSON value can take once a template renders it: its text, escapes included
    (an ``\\uXXXX`` is longer than the character's UTF-8 bytes), times ``JSON_FACTOR``."""
    return JSON_FACTOR * len(ENCODER.encode(value)) + 1


def _plain(value: object) -> Any:
    """What ``json.dumps`` does not take: read-only mappings as dicts, anything else as its text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


# ``json.dumps(value, default=_plain)``'s encoder, built once: dumps builds one per call when given
# ``default`` (an Anthropic client's whole body is measured this way on every request).
ENCODER = json.JSONEncoder(default=_plain)


def part_tokens(part: Any) -> int:
    """One content part: a text part its text, an image ``IMAGE_TOKENS`` (its URL or data is not
    text the model reads), any other part (audio, a file, a dialect's own) its JSON."""
    if isinstance(part, str):
        return text_tokens(part)
    if isinstance(part, Mapping):
        kind = part.get("type")
        if not isinstance(kind, str):  # a list or an object is unhashable: no set lookup for it
            return json_tokens(part)
        if kind in IMAGE_PARTS:
            return IMAGE_TOKENS
        text = part.get("text")
        if kind in TEXT_PARTS and isinstance(text, str) and len(part) == 2:
            return text_tokens(text) + 1
    return json_tokens(part)


def message_tokens(message: ChatMessage) -> int:
    content = message.content
    total = MESSAGE_TOKENS + text_tokens(message.role)
    if isinstance(content, str):
        total += text_tokens(content)
    elif content is not None:
        total += sum(part_tokens(p) for p in content)
    if message.name is not None:
        total += text_tokens(message.name)
    if message.tool_calls:
        total += json_tokens(message.tool_calls)
    if message.tool_call_id is not None:
        total += text_tokens(message.tool_call_id)
    if message.reasoning is not None:  # thinking sent back goes to the template with the turn
        total += text_tokens(message.reasoning)
    return total


def options_tokens(chat: ChatOptions) -> int:
    total = 0
    if chat.tools:
        total += TOOLS_TOKENS + json_tokens(chat.tools)
    if chat.tool_choice is not None:
        total += json_tokens(chat.tool_choice)
    if chat.reasoning:
        total += json_tokens(chat.reasoning)
    return total


def prompt_item_tokens(item: PromptItem) -> int:
    """A completion prompt: text as text, token ids exactly, each with a BOS an upstream may add."""
    return (text_tokens(item) if isinstance(item, str) else len(item)) + 1


def structured_tokens(structured: StructuredOutput) -> int:
    return json_tokens(structured.value) if structured.value is not None else 0


def bound(request: InternalRequest) -> int:
    """The most prompt tokens ``request`` can take, counted once (``n`` choices share one prompt)."""
    total = 0
    if request.operation is Operation.CHAT:
        total += CHAT_TOKENS + sum(message_tokens(m) for m in request.messages)
        if request.chat is not None:
            total += options_tokens(request.chat)
    else:
        total += sum(prompt_item_tokens(p) for p in request.prompts)
    sampling = request.sampling
    if sampling.suffix is not None:
        total += text_tokens(sampling.suffix)
    if sampling.structured is not None:
        total += structured_tokens(sampling.structured)
    if request.extra_body:
        total += json_tokens(request.extra_body)
    if request.native is not None:
        # The client's body, sent whole to a target of its own vendor (fields the gateway does not
        # model included), with the stored chain it continues: whichever the chosen target is sent.
        whole = CHAT_TOKENS + TOOLS_TOKENS + json_tokens(request.native)
        total = max(total, whole + json_tokens(request.chain) if request.chain else whole)
    return total


# --- what a stream relayed as it came carried ------------------------------------------------------------

# The string values that hold generated text in the events relayed as they came: OpenAI's chat chunks
# (content, a refusal, reasoning as vLLM names it, a tool call's name and arguments), its completion
# chunks (text), Responses events (each ``.delta``) and Anthropic's (text, a tool's input as
# ``partial_json``, thinking); a blank may follow the colon, as some servers write. The string's JSON
# text is matched whole, escapes and all. A key cannot be matched inside a string, where every quote is
# escaped; one whose value is no string (``null``, a list) is not matched.
GENERATED = re.compile(
    rb'"(?:content|text|arguments|name|reasoning_content|reasoning|refusal|delta|partial_json|thinking)"'
    rb':[ \t\r\n]*"([^"\\]*(?:\\.[^"\\]*)*)"'
)


def relayed_tokens(data: bytes, events: int) -> int:
    """The most tokens ``events`` whole relayed events (``data``, not decoded) can carry: the same
    factor as the prompt's, a token per byte of each generated text (its JSON string: an escape is no
    shorter than the bytes it stands for) and one more, and one per event (a token that shows no
    text). One scan in C on the relay's path, about a third of decoding the events' JSON."""
    texts = GENERATED.findall(data)
    return events + len(texts) + sum(map(len, texts))


def delta_tokens(delta: Delta) -> int:
    """The most tokens a decoded delta can carry: its ids where it has them, else its texts' bytes
    (and one each), a tool call's JSON as the prompt's JSON counts."""
    return _generated(delta.token_ids, delta.text, delta.reasoning, delta.tool_calls)


def _generated(ids: Sequence[int] | None, text: str, reasoning: str | None, calls: Sequence[Any] | None) -> int:
    if ids:
        return len(ids)
    total = text_tokens(text)
    if reasoning:
        total += text_tokens(reasoning)
    if calls:
        total += json_tokens(calls)
    return total


def answer_tokens(completion: Completion) -> int:
    """The most tokens a whole answer's choices can hold, as ``delta_tokens`` bounds a delta's: for
    an answer its target reported no usage for."""
    return sum(_generated(c.token_ids, c.text, c.reasoning, c.tool_calls) for c in completion.choices)
