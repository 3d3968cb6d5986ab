"""The fake's vocabulary and shared pieces: constants, the word tokenizer, vLLM's error envelope."""

from __future__ import annotations

import functools
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any, Final

from aiohttp import web

JSON = dict[str, Any]
# FastAPI's JSONResponse and pydantic's model_dump_json: compact, UTF-8 left unescaped.
dumps: Final = functools.partial(json.dumps, separators=(",", ":"), ensure_ascii=False)

WORDS: Final = (
    "amber birch cedar delta ember fable garnet harbor indigo jasper kettle lantern meadow nectar orchid"
    " pebble quartz raven saffron timber umber velvet willow xenon yarrow zephyr anchor beacon cobalt drift"
)
VOCAB: Final = tuple(WORDS.split())
NATURAL_LENGTH: Final = 8
VOCAB_SIZE: Final = 32000
EOS_ID: Final = 2
EOS_TOKEN: Final = "</s>"
MAX_MODEL_LEN: Final = 2048
TOKEN_RE: Final = re.compile(r"\s*\S+|\s+")
ERROR_TYPES: Final = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError", 500: "InternalServerError"}


# --- tokenizer -----------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Words with their leading whitespace; trailing whitespace is a token of its own."""
    return TOKEN_RE.findall(text)


def token_id(token: str) -> int:
    return EOS_ID if token == EOS_TOKEN else zlib.crc32(token.encode()) % VOCAB_SIZE


class Vocabulary:
    """Token strings by id, learnt from every text this server tokenized (a crc32 cannot be inverted)."""

    def __init__(self) -> None:
        self._strings: dict[int, str] = {EOS_ID: EOS_TOKEN}
        for word in VOCAB:
            self.encode(" " + word)

    def encode(self, text: str) -> list[int]:
        ids = []
        for token in tokenize(text):
            ids.append(token_id(token))
            self._strings.setdefault(ids[-1], token)
        return ids

    def token(self, tid: int) -> str:
        return self._strings.get(tid, f"<{tid}>")

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.token(tid) for tid in ids)


# --- errors --------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as ``{"error": {message, type, param, code}}``, vLLM's envelope."""

    def __init__(
        self, status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, dict(headers or {})

    def envelope(self) -> JSON:
        kind = ERROR_TYPES.get(self.status) or HTTPStatus(self.status).phrase.replace(" ", "") + "Error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}

    def response(self) -> web.Response:
        return web.json_response(self.envelope(), status=self.status, headers=self.headers, dumps=dumps)


def invalid(message: str, param: str | None = None, value: object = None) -> ApiError:
    """A 400 worded like vLLM's ``VLLMValidationError``, whose ``str()`` appends parameter and value."""
    extras = ([f"parameter={param}"] if param else []) + ([f"value={value}"] if value is not None else [])
    return ApiError(400, f"{message} ({', '.join(extras)})" if extras else message, param)


class ClientGone(Exception):
    """The client closed the connection while the fake was still answering."""
