"""Responses request bodies → the internal (chat) request, and input items → chat messages.

A chat target is reached through chat (docs/dialects.md, "OpenAI Responses"): ``input`` items
become messages (``function_call`` an assistant's tool call, ``function_call_output`` a tool
message), ``instructions`` a system message first, function tools chat tools. The body also rides
along as it came (``native``), for a target's own ``/v1/responses`` (``egress``). What only OpenAI's
serves (hosted tools, files, item types the gateway does not model, ``include``) is marked
``RESPONSES_NATIVE`` with the client's name for it: an OpenAI target takes it as it is, any other
refuses it by that name; nothing is dropped unsaid. ``reasoning`` items are kept (in the stored
conversation) but not sent to chat: a chat target takes no reasoning input.

The parsed turn (``Turn``) rides on the request as its ``reply``: what the answer echoes, the
response id, this turn's input items (with ids, as ``input_items`` lists them) and, for stores,
what came before.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gateway.core.errors import InvalidRequest
from gateway.core.request import (
    ChatMessage,
    ChatOptions,
    Feature,
    InternalRequest,
    Operation,
    Sampling,
    StructuredOutput,
)
from gateway.dialects.common import FeatureSet, new_id, request_of, validate
from gateway.dialects.refusals import not_one_of, part_type
from gateway.dialects.responses.schema import ResponsesBody, TextConfig

JSON = Any
# Top-level fields naming server-side features the gateway does not model, and why.
REFUSED = {
    "background": "background responses are not served by this gateway (they need a job queue)",
    "conversation": "conversation objects are not served by this gateway: chain with 'previous_response_id'",
    "prompt": "stored prompt templates are not served by this gateway: send 'input' and 'instructions'",
}
# OpenAI's own fields, to an OpenAI target's /v1/responses as they came; refused by name elsewhere.
OPENAI_ONLY = ("max_tool_calls", "top_logprobs", "include", "context_management", "image", "access_programs")
NATIVE = "served only by OpenAI's own /v1/responses"
Native = list[tuple[str, str]]  # the fields only OpenAI serves, each with why
ROLES = ("user", "system", "developer", "assistant")
PLATFORM = (
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "moderation",
)


@dataclass(slots=True, eq=False)
class Turn:
    """One Responses request as its answer and its store need it again (``InternalRequest.reply``)."""

    id: str
    created_at: int
    echo: dict[str, JSON]  # the request's fields the response object repeats
    input_items: list[JSON]  # this turn's input, each item with an id
    instructions: str | None = None
    store: bool = True
    previous: str | None = None  # previous_response_id
    history: list[JSON] = field(default_factory=list)  # the items of the chain before this turn
    # the provider whose own /v1/responses answered (``egress``), stored with the response; and the
    # one that answered the previous response: a stateful upstream takes its own chain by id
    upstream: str | None = None
    previous_upstream: str | None = None
    final: dict[str, JSON] | None = None  # the response object, once rendered (whole, or at a stream's end)


def _need(item: dict[str, JSON], key: str, at: str) -> str:
    """``item``'s string ``key``, which it must hold (``at``: the item's path)."""
    value = item.get(key)
    if value is None:
        raise InvalidRequest(f"'{at}.{key}' is required", param=f"{at}.{key}")
    if not isinstance(value, str):
        raise InvalidRequest(f"'{at}.{key}' must be a string", param=f"{at}.{key}")
    return value


def _kind(part: JSON) -> str | None:
    """A part's ``type`` where it is a string: a list or an object there is unhashable, and a set
    lookup of it raised TypeError (a 500); the checks that follow name it."""
    kind = part.get("type") if isinstance(part, dict) else None
    return kind if isinstance(kind, str) else None


def _text_of(content: JSON, at: str, kinds: tuple[str, ...], first: int = 0) -> str:
    """The text of a content string or list of text parts (``kinds``: the part types read as text;
    ``first``: the index in the client's list of ``content``'s first part)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"'{at}' must be a string or an array of content parts", param=at)
    texts = []
    for j, part in enumerate(content, first):
        if _kind(part) not in kinds:
            raise part_type(part, f"{at}[{j}]", kinds)
        texts.append(_need(part, "text" if part["type"] != "refusal" else "refusal", f"{at}[{j}]"))
    return "".join(texts)


def _call_output(output: JSON, at: str, native: Native) -> None:
    """A ``function_call_output``'s output: text, or parts; its images and files (what an Agents SDK
    tool returning ``ToolOutputImage`` sends) are named in ``native``: a chat tool message holds text."""
    if not isinstance(output, list):
        _text_of(output, at, TOOL_TEXT)
        return
    for j, part in enumerate(output):
        kind = _kind(part)
        if kind in TOOL_NATIVE:
            native.append((f"{at}[{j}].type", f"{kind!r} in a function call's output {NATIVE}"))
        else:
            _text_of([part], at, TOOL_TEXT, j)


def _untyped(part: JSON, at: str, kinds: tuple[str, ...]) -> InvalidRequest:
    """A user part that names no type the gateway or OpenAI could read (a string one is OpenAI's)."""
    if isinstance(part, dict) and part.get("type") is not None and not isinstance(part["type"], str):
        return InvalidRequest(f"'{at}.type' must be a string naming the part's type", param=f"{at}.type")
    return part_type(part, at, kinds)


def _user_content(content: JSON, at: str, native: Native | None = None) -> str | tuple[JSON, ...]:
    """A user, system or developer message's content as chat content: text alone stays a string.
    ``native``: parts only OpenAI serves (files, audio, an image by file id) are named there and
    left out, not refused (the request then goes only to an OpenAI target)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"'{at}' must be a string or an array of content parts", param=at)
    parts: list[JSON] = []
    for j, part in enumerate(content):
        here = f"{at}[{j}]"
        kind = _kind(part)
        if (
            native is not None
            and kind is not None
            and ((kind != "input_text" and kind != "input_image") or part.get("file_id") is not None)
        ):
            native.append((f"{here}.type", f"{kind!r} {NATIVE}"))
            continue
        if kind == "input_text":
            parts.append({"type": "text", "text": _need(part, "text", here)})
        elif kind == "input_image":
            if part.get("file_id") is not None:
                raise InvalidRequest(f"'{here}.file_id': files are not served by this gateway", param=f"{here}.file_id")
            image: dict[str, JSON] = {"url": _need(part, "image_url", here)}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _untyped(part, here, ("input_text", "input_image"))
    if all(p["type"] == "text" for p in parts):  # (none, when every part is OpenAI's alone: "")
        return "".join(p["text"] for p in parts)
    return tuple(parts)


def normalize(raw: str | list[JSON], native: Native | None = None) -> list[JSON]:
    """The request's ``input`` as items, each with its type and an id (``input_items`` lists them):
    a string is one user message. Each item is checked here, naming it; ``native`` collects the
    names of what only OpenAI serves (kept as it came)."""
    native = [] if native is None else native
    if isinstance(raw, str):
        return [{"type": "message", "id": new_id("msg"), "role": "user", "content": [_text_part(raw)]}]
    items = []
    for i, item in enumerate(raw):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"'{at}' must be an object", param=at)
        kind = item.get("type", "message")
        out = dict(item)
        out["type"] = kind
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise not_one_of(f"{at}.role", role, ROLES)
            content = item.get("content")
            if role == "assistant":
                _text_of(content, f"{at}.content", ("output_text", "refusal", "input_text"))
            else:
                _user_content(content, f"{at}.content", native)
            if isinstance(content, str):
                out["content"] = [_text_part(content, "output_text" if role == "assistant" else "input_text")]
            out.setdefault("id", new_id("msg"))
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                _need(item, key, at)
            out.setdefault("id", new_id("fc"))
        elif kind == "function_call_output":
            _need(item, "call_id", at)
            _call_output(item.get("output"), f"{at}.output", native)
            out.setdefault("id", new_id("fco"))
        elif kind == "reasoning":
            if not isinstance(item.get("summary", []), list):
                raise InvalidRequest(f"'{at}.summary' must be an array", param=f"{at}.summary")
            out.setdefault("id", new_id("rs"))
        elif isinstance(kind, str) and kind:
            native.append((f"{at}.type", f"{kind!r} {NATIVE}"))
            out = dict(item)  # kept as it came: the gateway does not model it
        else:
            raise InvalidRequest(f"'{at}.type' must be a string naming the item's type", param=f"{at}.type")
        items.append(out)
    return items


def _text_part(text: str, kind: str = "input_text") -> dict[str, JSON]:
    return {"type": kind, "text": text} if kind == "input_text" else {"type": kind, "text": text, "annotations": []}


def to_messages(items: list[JSON]) -> list[ChatMessage]:
    """Checked items (``normalize``, or a stored conversation's) → chat messages. A function call
    joins the assistant message before it (chat puts an answer's text and tool calls in one)."""
    out: list[ChatMessage] = []
    for i, item in enumerate(items):
        kind = item["type"]
        at = f"input[{i}]"
        if kind == "message":
            role = item["role"]
            if role == "assistant":
                text = _text_of(item["content"], f"{at}.content", ("output_text", "refusal", "input_text"))
                out.append(ChatMessage("assistant", text))
            else:
                content = _user_content(item["content"], at, [])
                out.append(ChatMessage("system" if role == "developer" else role, content))
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function"}
            call["function"] = {"name": item["name"], "arguments": item["arguments"]}
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                out[-1] = replace(last, tool_calls=(*(last.tool_calls or ()), call))
            else:
                out.append(ChatMessage("assistant", None, tool_calls=(call,)))
        elif kind == "function_call_output":
            text = _text_of(_texts_only(item["output"]), f"{at}.output", TOOL_TEXT)
            out.append(ChatMessage("tool", text, tool_call_id=item["call_id"]))
        # reasoning: kept in the stored conversation; a chat target takes no reasoning input
    return out


def _texts_only(output: JSON) -> JSON:
    """A checked output's text parts (a request with others goes to OpenAI as it came, not as chat)."""
    return [p for p in output if _kind(p) not in TOOL_NATIVE] if isinstance(output, list) else output


def _tools(tools: list[JSON] | None, native: Native) -> tuple[JSON, ...] | None:
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        at = f"tools[{i}]"
        if kind != "function":
            if not isinstance(kind, str):
                raise InvalidRequest(f"'{at}.type' must be a string naming the tool's type", param=f"{at}.type")
            native.append((f"{at}.type", f"hosted tool {kind!r}, {NATIVE}"))
            continue
        function = {"name": _need(tool, "name", at)}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return tuple(out) or None


def _tool_choice(choice: str | dict[str, JSON] | None, native: Native) -> JSON:
    if choice is None or isinstance(choice, str):
        if choice not in (None, "auto", "none", "required"):
            raise not_one_of("tool_choice", choice, ("auto", "none", "required"))
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _need(choice, "name", "tool_choice")}}
    if not isinstance(kind, str):
        raise InvalidRequest("'tool_choice.type' must be a string", param="tool_choice.type")
    native.append(("tool_choice.type", f"{kind!r} {NATIVE}"))
    return None


def _chosen_tool_given(choice: str | dict[str, JSON] | None, tools: list[JSON] | None) -> None:
    """A ``tool_choice`` that needs a tool names one the request gives: chat targets would drop it
    (no tools) or an upstream refuse it; OpenAI's own /v1/responses answers 400 for both."""
    if choice == "required" and not tools:
        raise InvalidRequest("'tool_choice' 'required' needs 'tools'", param="tool_choice")
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return
    names = {t.get("name") for t in tools or () if t.get("type") == "function"}
    if choice.get("name") not in names:
        name = choice.get("name")
        raise InvalidRequest(f"'tool_choice.name' {name!r} is not a function in 'tools'", param="tool_choice.name")


def _format(text: TextConfig | None, fs: FeatureSet) -> StructuredOutput | None:
    given = text.format if text is not None else None
    fmt = {"type": "text"} if given is None else given  # ``{}`` is no format: named below, not read as text
    fs.use(Feature.RESPONSES_NATIVE, "text.verbosity", text is not None and text.verbosity is not None, NATIVE)
    kind = fmt.get("type")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("'text.format.schema' must be a JSON schema object", param="text.format.schema")
        fs.use(Feature.JSON_SCHEMA, "text.format")
        return StructuredOutput("json_schema", fmt["schema"])
    if kind == "json_object":
        fs.use(Feature.JSON_OBJECT, "text.format")
        return StructuredOutput("json_object")
    if kind == "text":
        return None
    raise not_one_of("text.format.type", kind, ("text", "json_object", "json_schema"))


def _refuse_unmodelled(b: ResponsesBody) -> None:
    for name, why in REFUSED.items():
        value = getattr(b, name)
        if value is not None and not (name == "background" and value is False):
            raise InvalidRequest(f"'{name}': {why}", param=name)


def _echo(b: ResponsesBody) -> dict[str, JSON]:
    """The request's fields as the response object repeats them (OpenAI's defaults where not given)."""
    effort, summary = (b.reasoning.effort, b.reasoning.summary) if b.reasoning else (None, None)
    return {
        "instructions": b.instructions,
        "max_output_tokens": b.max_output_tokens,
        "metadata": dict(b.metadata or {}),
        "parallel_tool_calls": True if b.parallel_tool_calls is None else b.parallel_tool_calls,
        "previous_response_id": b.previous_response_id,
        "reasoning": {
            "effort": effort,
            "summary": summary,
        },
        "store": True if b.store is None else b.store,
        "temperature": 1.0 if b.temperature is None else b.temperature,
        "text": {"format": (b.text.format if b.text and b.text.format else {"type": "text"})},
        "tool_choice": b.tool_choice if b.tool_choice is not None else "auto",
        "tools": list(b.tools or []),
        "top_p": 1.0 if b.top_p is None else b.top_p,
        "truncation": b.truncation or "disabled",
        "user": b.user,
        "background": False,
        "service_tier": b.service_tier or "default",
    }


def parse(data: dict[str, JSON], created_at: int) -> InternalRequest:
    b = validate(ResponsesBody, data)
    _refuse_unmodelled(b)
    fs = FeatureSet()
    native: Native = [(name, NATIVE) for name in OPENAI_ONLY if getattr(b, name) not in (None, [])]
    items = normalize(b.input, native)
    turn = Turn(
        id=new_id("resp"),
        created_at=created_at,
        echo=_echo(b),
        input_items=items,
        instructions=b.instructions,
        store=b.store is not False,
        previous=b.previous_response_id,
    )
    tools = _tools(b.tools, native)
    fs.use(Feature.TOOLS, "tools", tools)
    _chosen_tool_given(b.tool_choice, b.tools)
    choice = _tool_choice(b.tool_choice, native)
    fs.use(Feature.TOOLS, "tool_choice", choice not in (None, "none", "auto") and not tools)
    reasoning = {"reasoning_effort": b.reasoning.effort} if b.reasoning and b.reasoning.effort else None
    fs.use(Feature.REASONING, "reasoning.effort", reasoning)
    for name, why in native:
        fs.use(Feature.RESPONSES_NATIVE, name, why=why)
    extra = {name: getattr(b, name) for name in PLATFORM if getattr(b, name) is not None}
    for name in extra:
        fs.use(Feature.EXTRA_BODY, name)
    sampling = Sampling(
        max_tokens=b.max_output_tokens, temperature=b.temperature, top_p=b.top_p, structured=_format(b.text, fs)
    )
    stream = bool(b.stream)
    if b.stream_options is not None and not stream:
        raise InvalidRequest("'stream_options' is only allowed when 'stream' is true", param="stream_options")
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=conversation(turn),
        sampling=sampling,
        chat=ChatOptions(
            tools=tools,
            tool_choice=choice if tools else None,
            parallel_tool_calls=b.parallel_tool_calls if tools else None,
            reasoning=reasoning,
        ),
        stream=stream,
        stream_usage=stream,  # the completed event carries usage
        user=b.user,
        extra_body=extra or None,
        native=data,
        native_dialect="responses",
        reply=turn,
    )


def conversation(turn: Turn) -> tuple[ChatMessage, ...]:
    """The chat messages of a turn: its instructions, the chain before it, its input."""
    head = [ChatMessage("system", turn.instructions)] if turn.instructions is not None else []
    return tuple(head + to_messages(turn.history + turn.input_items))


def with_history(request: InternalRequest, history: list[JSON], upstream: str | None = None) -> InternalRequest:
    """``request`` continuing a stored chain: ``history`` (its items, oldest first) goes before this
    turn's input. (Instructions are not carried over from the previous response, as OpenAI does.)
    ``upstream``: the provider whose own /v1/responses made the previous response. Items only OpenAI
    serves (its hosted tools' calls) make the chain OpenAI's alone, named by the item."""
    turn: Turn = request.reply
    turn.history = history
    turn.previous_upstream = upstream
    kinds = sorted({kind for item in history if (kind := _openai_only(item)) is not None})
    chain = tuple(history)  # all of it counts: an upstream's own /v1/responses reads items chat drops
    if not kinds:
        return replace(request, messages=conversation(turn), chain=chain)
    features = request.features | {Feature.RESPONSES_NATIVE}
    fields, reasons = request.fields, request.reasons  # a field of this turn's own names it first
    if Feature.RESPONSES_NATIVE not in fields:
        fields = {**fields, Feature.RESPONSES_NATIVE: "previous_response_id"}
        reasons = {**reasons, Feature.RESPONSES_NATIVE: f"its chain holds {kinds[0]!r} items, {NATIVE}"}
    return replace(request, messages=conversation(turn), features=features, fields=fields, reasons=reasons, chain=chain)


CHAT_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
TOOL_TEXT = ("input_text", "output_text")
TOOL_NATIVE = frozenset({"input_image", "input_file"})  # in a function call's output: OpenAI's alone
MESSAGE_PARTS = frozenset({"input_text", "output_text", "refusal", "input_image"})


def _openai_only(item: JSON) -> str | None:
    """What of a stored item only OpenAI serves (its type, or a part's), or None: a chain holding it
    is refused elsewhere by name, not sent to chat without it."""
    kind = str(item.get("type"))
    if kind not in CHAT_ITEMS:
        return kind
    parts = item.get("content") if kind == "message" else item.get("output")
    for part in parts if kind in ("message", "function_call_output") and isinstance(parts, list) else ():
        part_kind = _kind(part)
        if kind == "message" and (part_kind not in MESSAGE_PARTS or part.get("file_id") is not None):
            return str(part_kind)
        if kind == "function_call_output" and part_kind in TOOL_NATIVE:
            return str(part_kind)
    return None
