"""The prompt's token bound (``gateway.core.prompt``) is an upper bound a hard budget can rely on: every
field of every dialect that carries prompt text raises it by at least a token per byte, every field of
the internal request is classified, and it bounds the real token count of the tokenizers we know,
token-dense text included."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from gateway.core import prompt
from gateway.core.errors import InvalidRequest
from gateway.core.request import ChatMessage, ChatOptions, InternalRequest, Operation, Sampling
from gateway.dialects import DIALECTS
from gateway.dialects.responses import with_history
from gateway.limits import plan as planning

ROOT = Path(__file__).resolve().parents[2]
CHAT, COMPLETION, EMBEDDING = Operation.CHAT, Operation.COMPLETION, Operation.EMBEDDING
# what a client may write: any character, punctuation and whitespace often (token-dense text)
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("!?.,;:'\"(){}[]<>|/\\-_=+*&^%$#@~` \n\t")), st.characters(exclude_categories=("Cs",))
    ),  # lone surrogates: not text a tokenizer takes
    max_size=300,
)


def tool(description: str = "d", field_doc: str = "p") -> dict[str, Any]:
    params = {"type": "object", "properties": {"a": {"type": "string", "description": field_doc}}}
    return {"type": "function", "function": {"name": "f", "description": description, "parameters": params}}


def call(arguments: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}


# Every place a chat or completion body of the OpenAI-shaped dialects carries prompt text, with the text
# at X. A dialect that does not take a place refuses it (InvalidRequest): the text never goes upstream.
CHAT_PLACES: dict[str, Any] = {
    "content": lambda x: {"messages": [{"role": "user", "content": x}]},
    "text part": lambda x: {"messages": [{"role": "user", "content": [{"type": "text", "text": x}]}]},
    "second part": lambda x: {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": x}]}]
    },
    "system": lambda x: {"messages": [{"role": "system", "content": x}, {"role": "user", "content": "q"}]},
    "system parts": lambda x: {
        "messages": [{"role": "system", "content": [{"type": "text", "text": x}]}, {"role": "user", "content": "q"}]
    },
    "tool result": lambda x: {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": x},
        ]
    },
    "tool result parts": lambda x: {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": x}]},
        ]
    },
    "tool call arguments": lambda x: {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call(x)]}]
    },
    "assistant": lambda x: {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": x}]},
    "name": lambda x: {"messages": [{"role": "user", "name": "n" + x, "content": "q"}]},
    "tool description": lambda x: {"messages": [{"role": "user", "content": "q"}], "tools": [tool(description=x)]},
    "tool schema": lambda x: {"messages": [{"role": "user", "content": "q"}], "tools": [tool(field_doc=x)]},
    "json schema": lambda x: {
        "messages": [{"role": "user", "content": "q"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": {"type": "object", "description": x}},
        },
    },
}
# Anthropic Messages: system blocks, content blocks, tool results and uses, tools' input schemas.
QUESTION = {"role": "user", "content": "q"}
USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}


def messages_body(**fields: Any) -> dict[str, Any]:
    return {"max_tokens": 10, "messages": [QUESTION], **fields}


def tool_result(content: Any) -> dict[str, Any]:
    return messages_body(
        messages=[QUESTION, USE, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", **content}]}]
    )


CHAT_PLACES |= {
    "messages system": lambda x: messages_body(system=x),
    "messages system blocks": lambda x: messages_body(
        system=[{"type": "text", "text": "a"}, {"type": "text", "text": x}]
    ),
    "messages text block": lambda x: messages_body(
        messages=[{"role": "user", "content": [{"type": "text", "text": x}]}]
    ),
    "messages tool result": lambda x: tool_result({"content": x}),
    "messages tool result blocks": lambda x: tool_result({"content": [{"type": "text", "text": x}]}),
    "messages tool use input": lambda x: messages_body(
        messages=[
            QUESTION,
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": x}}]},
        ]
    ),
    "messages tool schema": lambda x: messages_body(
        tools=[{"name": "f", "description": x, "input_schema": {"type": "object", "description": x}}]
    ),
}
# OpenAI Responses (``/v1/responses``): the input as a string or items of every type, instructions,
# tools and the output's schema; items and parts only OpenAI serves ride in the body sent whole.
FUNCTION_CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}


def responses_items(*items: dict[str, Any]) -> dict[str, Any]:
    return {"input": [{"role": "user", "content": "q"}, *items]}


def called(output: Any) -> dict[str, Any]:
    return responses_items(FUNCTION_CALL, {"type": "function_call_output", "call_id": "c", "output": output})


CHAT_PLACES |= {
    "input": lambda x: {"input": x},
    "input message": lambda x: {"input": [{"type": "message", "role": "user", "content": x}]},
    "input_text part": lambda x: {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": x}]}]
    },
    "input developer": lambda x: responses_items({"role": "developer", "content": x}),
    "input system parts": lambda x: responses_items({"role": "system", "content": [{"type": "input_text", "text": x}]}),
    "input assistant": lambda x: responses_items({"role": "assistant", "content": x}),
    "input output_text": lambda x: responses_items(
        {"role": "assistant", "content": [{"type": "output_text", "text": x, "annotations": []}]}
    ),
    "input refusal": lambda x: responses_items({"role": "assistant", "content": [{"type": "refusal", "refusal": x}]}),
    "function_call arguments": lambda x: responses_items({**FUNCTION_CALL, "arguments": x}),
    "function_call name": lambda x: responses_items({**FUNCTION_CALL, "name": "f" + x}),
    "function_call_output": lambda x: called(x),
    "function_call_output parts": lambda x: called([{"type": "input_text", "text": x}]),
    "reasoning summary": lambda x: responses_items(
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": x}]}
    ),
    "item only OpenAI serves": lambda x: responses_items(
        {"type": "file_search_call", "id": "fs", "status": "completed", "queries": [x]}
    ),
    "input_file part": lambda x: {
        "input": [{"role": "user", "content": [{"type": "input_file", "filename": "f.txt", "file_data": x}]}]
    },
    "instructions": lambda x: {"input": "q", "instructions": x},
    "function tool description": lambda x: {
        "input": "q",
        "tools": [{"type": "function", "name": "f", "description": x, "parameters": {"type": "object"}}],
    },
    "function tool parameters": lambda x: {
        "input": "q",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "description": x}}],
    },
    "hosted tool": lambda x: {
        "input": "q",
        "tools": [{"type": "file_search", "vector_store_ids": ["v"], "filters": {"key": "k", "value": x}}],
    },
    "output schema": lambda x: {
        "input": "q",
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object", "description": x}}},
    },
}
COMPLETION_PLACES: dict[str, Any] = {
    "prompt": lambda x: {"prompt": x},
    "batch": lambda x: {"prompt": ["a", x]},
    "suffix": lambda x: {"prompt": "a", "suffix": x},
}
# OpenAI embeddings (``/v1/embeddings``): a string or a list of strings (token arrays: below)
EMBEDDING_PLACES: dict[str, Any] = {
    "embedding input": lambda x: {"input": x},
    "embedding inputs": lambda x: {"input": ["a", x]},
}
PLACES = (
    [(CHAT, name, place) for name, place in CHAT_PLACES.items()]
    + [(COMPLETION, name, place) for name, place in COMPLETION_PLACES.items()]
    + [(EMBEDDING, name, place) for name, place in EMBEDDING_PLACES.items()]
)


def parsed(dialect: Any, op: Operation, body: dict[str, Any]) -> InternalRequest | None:
    try:
        return dialect.parse(op, {"model": "m", **body}, "serverless")  # type: ignore[no-any-return]
    except InvalidRequest:
        return None


def size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize(("op", "name", "place"), PLACES, ids=[f"{op}-{name}" for op, name, _ in PLACES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=TEXT, y=TEXT.filter(bool))
def test_every_prompt_field_of_every_dialect_raises_the_bound_a_token_a_byte(
    op: Operation, name: str, place: Any, x: str, y: str
) -> None:
    for dialect_name, dialect in DIALECTS.items():
        small, large = parsed(dialect, op, place("a" + x)), parsed(dialect, op, place("a" + x + y))
        if small is None or large is None:
            continue  # the dialect refuses the field (or this text in it): nothing goes upstream
        grew = prompt.bound(large) - prompt.bound(small)
        assert grew >= size(y), (dialect_name, name, grew, size(y))


def test_every_place_is_taken_by_some_dialect() -> None:
    """The places above are real: each is parsed by at least one dialect (none is tested vacuously)."""
    for op, name, place in PLACES:
        assert any(parsed(d, op, place("text")) is not None for d in DIALECTS.values()), name


def test_a_part_list_counts_its_whole_size() -> None:
    """The defect: a list of parts counted as 256 characters whatever its size (2 MB charged as 64 tokens)."""
    text = "lorem ipsum " * 170_000
    as_string = InternalRequest(CHAT, "m", messages=(ChatMessage("user", text),))
    as_parts = InternalRequest(CHAT, "m", messages=(ChatMessage("user", ({"type": "text", "text": text},)),))
    assert prompt.bound(as_parts) >= prompt.bound(as_string) >= len(text)
    assert planning.estimate_prompt(as_parts) == prompt.bound(as_parts)


def test_images_count_their_stated_bound_not_their_data() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
    one = InternalRequest(CHAT, "m", messages=(ChatMessage("user", ({"type": "text", "text": "q"}, image)),))
    two = InternalRequest(CHAT, "m", messages=(ChatMessage("user", ({"type": "text", "text": "q"}, image, image)),))
    assert prompt.bound(two) - prompt.bound(one) == prompt.IMAGE_TOKENS
    assert prompt.bound(one) < 100_000


def test_other_parts_and_passed_through_fields_count_their_json() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "B" * 5000, "format": "wav"}}
    base = InternalRequest(CHAT, "m", messages=(ChatMessage("user", "q"),))
    with_audio = InternalRequest(CHAT, "m", messages=(ChatMessage("user", ({"type": "text", "text": "q"}, audio)),))
    assert prompt.bound(with_audio) - prompt.bound(base) >= 5000
    extra = InternalRequest(CHAT, "m", messages=(ChatMessage("user", "q"),), extra_body={"documents": ["x" * 900]})
    assert prompt.bound(extra) - prompt.bound(base) >= 900
    reasoning = ChatOptions(reasoning={"chat_template_kwargs": {"persona": "y" * 700}})
    assert prompt.bound(InternalRequest(CHAT, "m", messages=base.messages, chat=reasoning)) - prompt.bound(base) >= 700


@pytest.mark.parametrize("kind", [InternalRequest, ChatMessage, ChatOptions, Sampling])
def test_every_field_of_the_request_is_classified(kind: type) -> None:
    """A field added to the internal request (a new dialect's) must say whether it carries prompt text:
    counted in ``prompt.bound`` (``COUNTED``), or not (``NOT_PROMPT``)."""
    names = {f.name for f in fields(kind)}
    counted, other = prompt.COUNTED[kind], prompt.NOT_PROMPT[kind]
    assert not counted & other
    assert names == counted | other, f"classify in gateway/core/prompt.py: {sorted(names - counted - other)}"


def test_the_completion_worst_case_counts_every_generated_choice() -> None:
    request = InternalRequest(COMPLETION, "m", prompts=("a", "b"), sampling=Sampling(max_tokens=10, n=2, best_of=5))
    assert planning.estimate_tokens(request, 0) == 10 * 2 * 5


# --- against real tokenizers ---------------------------------------------------------------------------

CORPUS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "gateway tests talk to a real inference server",
    'yes no 0123456789 {}[]:," true false null',
] * 50
# the tiny Llama's template (tests/vllm/make_tiny_llama.py), which vLLM renders with text parts joined
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def byte_level() -> Tokenizer:
    """The tiny Llama's tokenizer (tests/vllm/make_tiny_llama.py): byte-level BPE with a BOS."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tok


def sentencepiece_like() -> Tokenizer:
    """Llama 2's kind: BPE over pieces with a ``▁`` prefix, unknown characters as byte tokens, a BOS."""
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>", *byte_tokens])
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tok


def known_tokenizers() -> list[tuple[str, Tokenizer]]:
    out = [("byte-level", byte_level()), ("sentencepiece", sentencepiece_like())]
    shipped = ROOT / ".vllm-model" / "tokenizer.json"  # the vLLM tier's model, where it is installed
    if shipped.exists():
        out.append(("vllm-model", Tokenizer.from_file(str(shipped))))
    return out


TOKENIZERS = known_tokenizers()
RENDER = jinja2.Environment().from_string(TEMPLATE)


def joined(content: Any) -> str:
    """A message's text as vLLM renders it into a template that takes text: its text parts joined."""
    return content if isinstance(content, str) else "\n".join(p["text"] for p in content)


def real_count(tok: Tokenizer, request: InternalRequest) -> int:
    if request.operation is not CHAT:  # completion and embedding prompts: each encoded alone
        return sum(len(tok.encode(p).ids) if isinstance(p, str) else len(p) for p in request.prompts)
    messages = [{"role": m.role, "content": joined(m.content)} for m in request.messages if m.content is not None]
    return len(tok.encode(RENDER.render(messages=messages, add_generation_prompt=True)).ids)


MESSAGES = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.lists(TEXT, min_size=1, max_size=3)),
    min_size=1,
    max_size=4,
)


def chat(messages: list[tuple[str, list[str]]], parts: bool) -> InternalRequest:
    built = tuple(
        ChatMessage(role, tuple({"type": "text", "text": t} for t in texts) if parts else "".join(texts))
        for role, texts in messages
    )
    return InternalRequest(CHAT, "m", messages=built)


@pytest.mark.parametrize(("name", "tok"), TOKENIZERS, ids=[n for n, _ in TOKENIZERS])
@settings(max_examples=60, deadline=None)
@given(messages=MESSAGES, parts=st.booleans(), prompts=st.lists(TEXT, min_size=1, max_size=3))
def test_the_bound_holds_for_the_tokenizers_we_know(
    name: str, tok: Tokenizer, messages: list[tuple[str, list[str]]], parts: bool, prompts: list[str]
) -> None:
    request = chat(messages, parts)
    assert real_count(tok, request) <= prompt.bound(request)
    completion = InternalRequest(COMPLETION, "m", prompts=tuple(prompts))
    assert real_count(tok, completion) <= prompt.bound(completion)


ITEMS = st.lists(
    st.one_of(
        st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "developer", "assistant"]), TEXT),
        st.builds(lambda t: {"role": "user", "content": [{"type": "input_text", "text": t}]}, TEXT),
        st.builds(lambda t: called(t)["input"][-1], TEXT),
    ),
    min_size=1,
    max_size=4,
)


@pytest.mark.parametrize(("name", "tok"), TOKENIZERS, ids=[n for n, _ in TOKENIZERS])
@settings(max_examples=60, deadline=None)
@given(items=ITEMS, instructions=st.none() | TEXT, inputs=st.lists(TEXT.filter(bool), min_size=1, max_size=3))
def test_the_bound_holds_for_responses_and_embeddings(
    name: str, tok: Tokenizer, items: list[dict[str, Any]], instructions: str | None, inputs: list[str]
) -> None:
    """A Responses request as a chat target gets it (its items as messages), and embeddings' inputs."""
    body = {"model": "m", "input": [FUNCTION_CALL, *items], "instructions": instructions}
    request = DIALECTS["responses"].parse(CHAT, body, "")
    assert real_count(tok, request) <= prompt.bound(request)
    embedding = DIALECTS["embeddings"].parse(EMBEDDING, {"model": "m", "input": inputs}, "")
    assert real_count(tok, embedding) <= prompt.bound(embedding)


DENSE = {"punctuation": "!?.,;:" * 67, "latin-1": "¿¡«»" * 100, "emoji": "🙂" * 100, "controls": "\x00\x01" * 200}


@pytest.mark.parametrize(("name", "tok"), TOKENIZERS, ids=[n for n, _ in TOKENIZERS])
@pytest.mark.parametrize("text", list(DENSE.values()), ids=list(DENSE))
def test_token_dense_prompts_are_bounded(name: str, tok: Tokenizer, text: str) -> None:
    """The defect: 400 punctuation characters took about 400 tokens against an estimate of 101."""
    request = InternalRequest(COMPLETION, "m", prompts=(text,))
    real = real_count(tok, request)
    assert real <= prompt.bound(request), (real, prompt.bound(request))


# --- Responses chains and embeddings' token arrays -----------------------------------------------------

HISTORY_ITEMS: dict[str, Any] = {
    "message": lambda x: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": x}]},
    "function_call_output": lambda x: {"type": "function_call_output", "call_id": "c", "output": x},
    "reasoning": lambda x: {"type": "reasoning", "summary": [], "encrypted_content": x},
    "hosted tool call": lambda x: {"type": "web_search_call", "status": "completed", "action": {"query": x}},
}


@pytest.mark.parametrize("item", list(HISTORY_ITEMS.values()), ids=list(HISTORY_ITEMS))
@settings(max_examples=25, deadline=None)
@given(x=TEXT, y=TEXT.filter(bool))
def test_a_stored_chain_raises_the_bound_a_token_a_byte_whatever_its_items(item: Any, x: str, y: str) -> None:
    """A ``previous_response_id``'s chain goes upstream with the request (as input, or held by the
    upstream that made it): every item counts, those chat targets are not sent included."""
    request = DIALECTS["responses"].parse(CHAT, {"model": "m", "input": "q", "previous_response_id": "r"}, "")
    small, large = with_history(request, [item("a" + x)]), with_history(request, [item("a" + x + y)])
    assert prompt.bound(large) - prompt.bound(small) >= size(y)


@settings(max_examples=25, deadline=None)
@given(ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=50), more=st.integers(1, 50))
def test_token_arrays_raise_the_bound_a_token_an_id(ids: list[int], more: int) -> None:
    """Embeddings' ``input`` as one token array or a list of them (and completions' token prompts)."""
    for body in (lambda t: {"input": t}, lambda t: {"input": [[1], t]}):
        small, large = (
            DIALECTS["embeddings"].parse(EMBEDDING, {"model": "m", **body(t)}, "") for t in (ids, ids + [7] * more)
        )
        assert prompt.bound(large) - prompt.bound(small) >= more
        assert prompt.bound(large) >= sum(len(p) for p in large.prompts)


# --- tokenizers the gateway does not know: the stated factor --------------------------------------------


def wordpiece() -> Tokenizer:
    """BERT's kind: words split into known pieces, an unknown word one ``[UNK]``; [CLS] and [SEP]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    return tok


def unigram() -> Tokenizer:
    """SentencePiece's unigram model without byte fallback (T5's kind): an unknown character ``<unk>``."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(
        CORPUS, trainers.UnigramTrainer(vocab_size=200, special_tokens=["<unk>"], unk_token="<unk>")
    )
    return tok


def characters() -> Tokenizer:
    """One token a character, an unknown one ``<unk>``: the most a tokenizer without merges spends."""
    vocab = {"<unk>": 0} | {c: i + 1 for i, c in enumerate(sorted(set("".join(CORPUS))))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    return tok


UNKNOWN = [("wordpiece", wordpiece()), ("unigram", unigram()), ("characters", characters())]


@pytest.mark.parametrize(("name", "tok"), UNKNOWN, ids=[n for n, _ in UNKNOWN])
@settings(max_examples=60, deadline=None)
@given(messages=MESSAGES, parts=st.booleans(), prompts=st.lists(TEXT, min_size=1, max_size=3))
def test_the_stated_factor_bounds_tokenizers_we_do_not_know(
    name: str, tok: Tokenizer, messages: list[tuple[str, list[str]]], parts: bool, prompts: list[str]
) -> None:
    """The bound is a factor, not a tokenizer: a token a UTF-8 byte (plus the template's fixed counts)
    bounds any tokenizer whose every token covers at least a byte of the text (docs/spend.md)."""
    request = chat(messages, parts)
    assert real_count(tok, request) <= prompt.bound(request)
    completion = InternalRequest(COMPLETION, "m", prompts=tuple(prompts))
    assert real_count(tok, completion) <= prompt.bound(completion)


@given(text=TEXT)
def test_the_factor_is_the_one_the_docs_state(text: str) -> None:
    """docs/spend.md: a text counts its UTF-8 bytes and one token; a prompt one BOS more; a chat 64,
    8 a message besides its role's text."""
    assert prompt.bound(InternalRequest(COMPLETION, "m", prompts=(text,))) == size(text) + 2
    one = InternalRequest(CHAT, "m", messages=(ChatMessage("user", text),))
    assert prompt.bound(one) == 64 + 8 + size("user") + 1 + size(text) + 1


def test_a_normalizer_that_lengthens_text_is_the_factors_named_exception() -> None:
    """docs/spend.md names it: NFKC makes 18 characters of U+FDFA (3 bytes), 18 tokens one a character."""
    tok = characters()
    tok.normalizer = normalizers.NFKC()
    request = InternalRequest(COMPLETION, "m", prompts=("\ufdfa",))
    assert real_count(tok, request) == 18 > prompt.bound(request) == 5
