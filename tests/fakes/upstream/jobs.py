"""Jobs: a validated request with its generated choices, which every wire renders in its own shape."""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tests.fakes.upstream.bodies import (
    JSON,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Knobs,
    StreamOptions,
    build_sampling,
    check_logprobs,
    check_request_level,
    parse,
)
from tests.fakes.upstream.errors import ApiError, invalid
from tests.fakes.upstream.model import (
    MAX_MODEL_LEN,
    VOCAB_SIZE,
    Choice,
    Sampling,
    Step,
    TokenLogprob,
    Vocabulary,
    generate,
    token_logprob,
    tokenize,
)

# The token strings every fake server has seen, shared as replicas of one model share a tokenizer:
# a prompt of token ids that one server's answer ended (a resumed stream) reads the same on another.
SHARED_VOCABULARY = Vocabulary()


@dataclass
class Engine:
    """What one server's model knows: the names it serves, its context, the token strings it has seen."""

    models: tuple[str, ...]
    strict_models: bool = False  # unknown models answer 404 (vLLM) rather than being served anyway
    context: int = MAX_MODEL_LEN
    vocab: Vocabulary = field(default_factory=lambda: SHARED_VOCABULARY)

    def check_model(self, model: str | None) -> None:
        if self.strict_models and model is not None and model not in self.models:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    ids: list[int]
    key: str = ""  # what the answer is seeded by when not the text: a chat's last message

    @property
    def answer_key(self) -> str:
        return self.key or self.text


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The one tool call a chat answer makes instead of text (``tool_job``)."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    created: int
    model: str
    prompts: tuple[Prompt, ...]
    n: int
    choices: tuple[Choice, ...]  # prompt-major: choice index = prompt_i * n + j
    stream: bool
    include_usage: bool
    continuous_usage: bool
    token_ids: bool
    logprobs: int | None
    echo: bool
    echo_text: str = ""  # chat: the last assistant message, when echo is asked
    role: str = "assistant"
    prompt_logprobs: tuple[tuple[TokenLogprob | None, ...], ...] = ()
    seed: int | None = None
    cached: int = 0  # prompt tokens reported as served from a prefix cache (the ``cached`` marker)
    cache_written: int = 0  # prompt tokens reported as written to a prompt cache (``cache_write``)
    tool_call: ToolCall | None = None  # the answer calls this tool; its steps are the arguments' pieces
    dense: bool = False  # prompt tokens counted a token a byte (the ``dense`` marker)
    dense_answer: bool = False  # completion tokens counted a token a byte (``dense_answer``)

    def prompt_of(self, index: int) -> Prompt:
        return self.prompts[index // self.n]

    def usage(self) -> JSON:
        prompt = sum(len(p.text.encode()) + 1 if self.dense else len(p.ids) for p in self.prompts)
        if self.dense_answer:
            completion = sum(len(step.text.encode()) for c in self.choices for step in c.steps)
        else:
            completion = sum(len(c.steps) for c in self.choices)
        usage: JSON = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
        if self.cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(self.cached, prompt)}
        return usage


class Memory:
    """The prompts recently answered, shared by every fake server (replicas of one model share its
    weights): a prompt that is an earlier prompt followed by the start of its answer (a stream resumed
    elsewhere: vLLM's completion from prompt plus the tokens sent, or a chat's partial assistant
    message with ``continue_final_message``) is answered with the rest of that answer, as a
    deterministic model would continue it."""

    def __init__(self, size: int = 512) -> None:
        self.prompts: deque[Prompt] = deque(maxlen=size)

    def answer(self, p: Prompt, s: Sampling, index: int) -> Choice:
        for earlier in reversed(self.prompts):
            if len(p.text) > len(earlier.text) and p.text.startswith(earlier.text):
                rest = p.text[len(earlier.text) :]
                k = len(tokenize(rest))
                whole = generate(earlier.answer_key, len(earlier.ids), replace(s, max_tokens=s.max_tokens + k), index)
                if "".join(step.text for step in whole.steps[:k]) == rest and len(whole.steps) > k:
                    return Choice(whole.steps[k:])
        if p not in self.prompts:
            self.prompts.append(p)
        return generate(p.answer_key, len(p.ids), s, index)


MEMORY = Memory()


def make_job(engine: Engine, req: Knobs, prompts: list[Prompt], id_prefix: str, request_id: str, **extra: Any) -> Job:
    n = 1 if req.n is None else req.n
    requested: int | None = req.max_tokens
    logprobs: int | None = req.logprobs if isinstance(req, CompletionRequest) else None
    if isinstance(req, ChatRequest):
        requested = req.max_completion_tokens or req.max_tokens
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
    samplings = [build_sampling(req, len(p.ids), requested, logprobs, engine.context) for p in prompts]
    choices = tuple(MEMORY.answer(p, s, j) for p, s in zip(prompts, samplings, strict=True) for j in range(n))
    options = req.stream_options or StreamOptions()
    return Job(
        id=f"{id_prefix}-{request_id}",
        created=int(time.time()),
        model=req.model,
        prompts=tuple(prompts),
        n=n,
        choices=choices,
        stream=bool(req.stream),
        include_usage=bool(req.stream and options.include_usage),
        continuous_usage=bool(req.stream and options.include_usage and options.continuous_usage_stats),
        token_ids=bool(req.return_token_ids),
        logprobs=samplings[0].logprobs,
        echo=bool(req.echo),
        seed=req.seed,
        **extra,
    )


def completion_prompts(vocab: Vocabulary, req: CompletionRequest) -> list[Prompt]:
    p = req.prompt
    if p is None or p == "" or p == []:
        raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if isinstance(p, str):
        return [Prompt(p, vocab.encode(p))]
    if all(isinstance(x, str) for x in p):
        return [Prompt(x, vocab.encode(x)) for x in p if isinstance(x, str)]
    lists = [x for x in p if isinstance(x, list)] or [[x for x in p if isinstance(x, int)]]
    for ids in lists:
        if not ids:
            raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
        if bad := [i for i in ids if not 0 <= i < VOCAB_SIZE]:
            raise invalid(f"Token id {bad[0]} is out of vocabulary", "prompt")
    return [Prompt(vocab.decode(ids), list(ids)) for ids in lists]


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):
        texts = (part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text")
        return "\n".join(str(t) for t in texts)
    return content or ""


def render_chat(
    messages: Sequence[ChatMessage], add_generation_prompt: bool = True, continue_final_message: bool = False
) -> str:
    """The fake's chat template: ``<|role|>`` then the text, one message a line; a final message to
    continue is left open, as the generation prompt would have opened its answer (``<|role|>``, then
    its text as the model wrote it)."""
    if continue_final_message and messages:
        *messages, last = messages
        return render_chat(messages, False) + f"<|{last.role}|>" + message_text(last.content)
    lines = "".join(f"<|{m.role}|> {message_text(m.content)}\n" for m in messages)
    return lines + ("<|assistant|>" if add_generation_prompt else "")


def completion_job(engine: Engine, body: JSON, request_id: str) -> Job:
    req = parse(CompletionRequest, body)
    check_request_level(req)
    engine.check_model(req.model)
    prompts = completion_prompts(engine.vocab, req)
    prompt_lps: tuple[tuple[TokenLogprob | None, ...], ...] = ()
    if req.echo and req.logprobs is not None:
        k = check_logprobs(req.logprobs) or 0
        prompt_lps = tuple(prompt_logprobs(engine.vocab, p, k) for p in prompts)
    return make_job(engine, req, prompts, "cmpl", request_id, prompt_logprobs=prompt_lps)


def prompt_logprobs(vocab: Vocabulary, prompt: Prompt, k: int) -> tuple[TokenLogprob | None, ...]:
    first, *rest = [vocab.token(t) for t in prompt.ids]
    return (TokenLogprob(first, None, ()), *(token_logprob(t, i + 1, k, frozenset()) for i, t in enumerate(rest)))


def chat_job(engine: Engine, body: JSON, request_id: str, tool: str | None = None, tool_arg: str = "") -> Job:
    """``tool``, ``tool_arg``: the ``tool`` and ``tool_arg`` markers (the tool to call, its strings)."""
    req = parse(ChatRequest, body)
    check_request_level(req)
    engine.check_model(req.model)
    if req.continue_final_message and (req.add_generation_prompt or not req.messages):
        # vLLM's check (serving_chat): the two ask for different things
        raise invalid("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", None)
    text = render_chat(req.messages, req.add_generation_prompt, req.continue_final_message)
    role = "assistant" if req.add_generation_prompt or not req.messages else req.messages[-1].role
    last = req.messages[-1] if req.messages else None
    echo = message_text(last.content) if req.echo and last is not None and last.role == role else ""
    if req.continue_final_message:
        return make_job(engine, req, [Prompt(text, engine.vocab.encode(text))], "chatcmpl", request_id, role=role)
    prompt = Prompt(text, engine.vocab.encode(text), message_text(last.content) if last is not None else "")
    job = make_job(engine, req, [prompt], "chatcmpl", request_id, echo_text=echo, role=role)
    turn = next((m for m in reversed(req.messages) if m.role != "system"), None)  # a system turn may follow
    return tool_job(job, req, turn, tool, tool_arg)


def chosen_tool(req: ChatRequest, name: str | None = None) -> dict[str, Any] | None:
    """The tool a model with vLLM's auto tool choice would call: the named one (``tool_choice``, or the
    ``tool`` marker's), else the first."""
    if not req.tools or req.tool_choice == "none":
        return None
    functions = [f for t in req.tools if isinstance(f := t.get("function") or {}, dict)]
    if isinstance(req.tool_choice, dict):
        name = (req.tool_choice.get("function") or {}).get("name")
    if name is not None:
        return next((f for f in functions if f.get("name") == name), None)
    return functions[0] if functions else None


def tool_arguments(fn: dict[str, Any], word: str) -> str:
    """Arguments that fit the tool's schema: its required properties (all, when it names none), each
    string the answer's first word, each number 1, each boolean true."""
    params = fn.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    props = props if isinstance(props, dict) else {}
    required = params.get("required") if isinstance(params, dict) else None
    required = required if isinstance(required, list) else list(props)
    values = {"string": word, "integer": 1, "number": 1, "boolean": True}
    # JSON Schema allows a list of types (``["string", "null"]``): the first is used
    kinds = {n: p.get("type") for n, p in props.items() if isinstance(p, dict) and n in required}
    kinds = {n: k[0] if isinstance(k, list) and k else k for n, k in kinds.items()}
    return json.dumps({n: values.get(k) if isinstance(k, str) else None for n, k in kinds.items()})


def tool_job(job: Job, req: ChatRequest, last: ChatMessage | None, name: str | None = None, word: str = "") -> Job:
    """A chat with tools whose last message is the user's calls a tool (a tool's result gets text),
    streaming the arguments in three pieces; ``n`` is 1 in such requests. ``name`` and ``word``: the
    ``tool`` and ``tool_arg`` markers' choice of tool and of its string arguments."""
    fn = chosen_tool(req, name)
    if fn is None or last is None or last.role != "user":
        return job
    args = tool_arguments(fn, word or (job.choices[0].text.split() or ["x"])[0])
    cuts = [0, len(args) // 3, 2 * len(args) // 3, len(args)]
    pieces = [args[a:b] for a, b in itertools.pairwise(cuts)]
    steps = tuple(
        Step(i, piece, "tool_calls" if i == len(pieces) - 1 else None, None, None) for i, piece in enumerate(pieces)
    )
    call = ToolCall(f"call_{job.id[-8:]}", str(fn.get("name") or ""))
    return replace(job, choices=(Choice(steps),), tool_call=call)
