"""A request's prompt as the engine will see it: token ids, for matching against the blocks vLLM's
KV-cache events report (``backends/pool/kv_events.py``).

Built once per pool at start-up from the model's directory: ``tokenizer.json`` (Hugging Face's
``tokenizers``) and, for chat, the chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s
``chat_template``) rendered as transformers' ``apply_chat_template`` does (a sandboxed jinja2
environment with ``trim_blocks``/``lstrip_blocks``, ``add_generation_prompt``), which is what vLLM's
OpenAI server runs. Completions are encoded with the tokenizer's special tokens (vLLM's
``add_special_tokens`` default for completions), a rendered chat without (its default for chat: the
template writes them). What cannot be rendered the same way (images, a template that fails) gives
``None``: that request is routed without the events.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.sandbox
from tokenizers import Tokenizer

from gateway.core.request import ChatMessage, InternalRequest

log = logging.getLogger("gateway.kv_events")
# Token-id prompts past this many tokens are not looked at (text is cut by ``max_chars``).
MAX_TOKENS = 65536
# Tokens dropped from the end of a prompt cut short: the last word's tokens may differ from the uncut
# text's, and a post-processor may have appended a token there.
CUT_MARGIN = 8


def _raise(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _chat_template(directory: Path) -> str | None:
    file = directory / "chat_template.jinja"
    if file.exists():
        return file.read_text()
    config = directory / "tokenizer_config.json"
    if not config.exists():
        return None
    template = json.loads(config.read_text()).get("chat_template")
    if isinstance(template, list):  # named templates: the "default" one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _special_tokens(directory: Path) -> dict[str, str]:
    """``bos_token``/``eos_token``/... as the template sees them (a string, or ``{"content": ...}``)."""
    config = directory / "tokenizer_config.json"
    if not config.exists():
        return {}
    out: dict[str, str] = {}
    for key, value in json.loads(config.read_text()).items():
        if key.endswith("_token"):
            content = value.get("content") if isinstance(value, dict) else value
            if isinstance(content, str):
                out[key] = content
    return out


def _content(message: ChatMessage) -> str | None:
    """Text parts joined by newlines, as vLLM's "string" content format does; None for any other part."""
    if message.content is None or isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return "\n".join(texts)


def prompt_chars(request: InternalRequest) -> int:
    """How much text ``PromptTokens.tokens`` would be given."""
    if request.prompts:
        first = request.prompts[0]
        return len(first) if isinstance(first, str) else 0
    return sum(len(m.content) if isinstance(m.content, str) else 64 for m in request.messages)


class PromptTokens:
    """The tokenizer and chat template of one model."""

    def __init__(self, directory: str | Path, max_chars: int = 1 << 62) -> None:
        """``max_chars``: only a prompt's first this many characters are tokenized (at a space), which
        bounds the cost per request; a deeper match rarely changes which replica is deepest."""
        self.max_chars = max_chars
        path = Path(directory)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        source = _chat_template(path)
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise, strftime_now=_strftime_now)
        self.template = env.from_string(source) if source is not None else None
        self.special = _special_tokens(path)

    def tokens(self, request: InternalRequest) -> list[int] | None:
        """The first prompt's token ids (what the engine would cache first), or None. An adapter's or a
        salted request's blocks are not the plain prompt's: None for them too."""
        if request.adapter is not None or (request.extra_body and "cache_salt" in request.extra_body):
            return None
        if request.prompts:
            first = request.prompts[0]
            if isinstance(first, str):
                return self.encode(first, special=True)
            return list(first[:MAX_TOKENS])
        if request.messages:
            text = self.render(request)
            return self.encode(text, special=False) if text is not None else None
        return None

    def encode(self, text: str, special: bool) -> list[int]:
        cut = len(text) > self.max_chars
        if cut:
            head = text[: self.max_chars]
            text = head[: head.rfind(" ")] if " " in head else head
        # encode_batch, unlike encode, releases the GIL while it works (tokenizers 0.2x)
        ids: list[int] = self.tokenizer.encode_batch([text], add_special_tokens=special)[0].ids
        return ids[: max(0, len(ids) - CUT_MARGIN)] if cut else ids

    def render(self, request: InternalRequest) -> str | None:
        """The chat as the engine's template renders it, ready for the assistant's answer."""
        if self.template is None:
            return None
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            content = _content(m)
            if content is None and m.content is not None:
                return None
            message: dict[str, Any] = {"role": m.role, "content": content}
            for key in ("name", "tool_calls", "tool_call_id"):
                if getattr(m, key) is not None:
                    message[key] = getattr(m, key)
            messages.append(message)
        tools = request.chat.tools if request.chat is not None else None
        extra = request.chat.reasoning.get("chat_template_kwargs") if request.chat and request.chat.reasoning else None
        kwargs = {**self.special, **(extra if isinstance(extra, dict) else {})}
        try:
            return self.template.render(
                **kwargs, messages=messages, tools=list(tools) if tools else None, add_generation_prompt=True
            )
        except Exception as exc:  # a template may fail any way on a message it did not expect
            log.debug("chat template failed (%s: %s): routed without kv events", type(exc).__name__, exc)
            return None
