"""OpenAI embeddings (``POST /v1/embeddings``), both ways: the client's body → the internal request,
vectors → OpenAI's list of embeddings; and the same shapes towards OpenAI-compatible upstreams
(OpenAI, ``vllm serve`` of an embedding model), written and read by ``egress.OpenAIWire``.

Upstreams are always asked for floats; ``encoding_format: base64`` is the gateway's encoding of
them (little-endian float32, as OpenAI's), so every upstream serves both.
"""

from __future__ import annotations

import base64
import struct
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gateway.core.errors import InvalidRequest, UpstreamMalformed
from gateway.core.request import EmbeddingOptions, Feature, InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.base import StreamEncoder
from gateway.dialects.common import (
    Body,
    FeatureSet,
    Items,
    Name,
    TokenCount,
    TokenIds,
    request_of,
    usage_from,
    validate,
)
from gateway.dialects.end_user import openai_user
from gateway.dialects.openai.single import SinglePathDialect

JSON = Any


def _input_kind(value: Any) -> str:
    if not isinstance(value, list) or not value:
        return "text" if not isinstance(value, list) else "texts"
    first = value[0]
    return "texts" if isinstance(first, str) else "batch" if isinstance(first, list) else "ids"


Text = Annotated[str, Field(min_length=1)]
EmbeddingInput = Annotated[
    Annotated[Text, Tag("text")]
    | Annotated[Annotated[list[Text], Items, Field(min_length=1)], Tag("texts")]
    | Annotated[Annotated[TokenIds, Field(min_length=1)], Tag("ids")]
    | Annotated[Annotated[list[Annotated[TokenIds, Field(min_length=1)]], Items, Field(min_length=1)], Tag("batch")],
    Discriminator(_input_kind),
]


class EmbeddingsBody(Body):
    model: Name
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: TokenCount | None = None
    user: Name | None = None


def parse(data: dict[str, JSON]) -> InternalRequest:
    b = validate(EmbeddingsBody, data)
    raw = b.input
    if isinstance(raw, str):
        prompts: tuple[str | tuple[int, ...], ...] = (raw,)
    elif isinstance(raw[0], str):
        prompts = tuple(raw)
    elif isinstance(raw[0], int):
        prompts = (tuple(raw),)
    else:
        prompts = tuple(tuple(p) for p in raw)
    fs = FeatureSet()
    fs.use(Feature.EMBEDDING, "input")
    fs.use(Feature.DIMENSIONS, "dimensions", b.dimensions is not None)
    return request_of(
        fs,
        Operation.EMBEDDING,
        b.model,
        prompts=prompts,
        user=b.user,
        embedding=EmbeddingOptions(dimensions=b.dimensions, base64=b.encoding_format == "base64"),
    )


def encoded(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def render(request: InternalRequest, completion: Completion) -> dict[str, JSON]:
    b64 = request.embedding is not None and request.embedding.base64
    data = [
        {"object": "embedding", "index": i, "embedding": encoded(v) if b64 else v}
        for i, v in enumerate(completion.embeddings or [])
    ]
    prompt = completion.usage.prompt_tokens if completion.usage else 0
    return {
        "object": "list",
        "data": data,
        "model": completion.model or request.model,
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }


# --- egress --------------------------------------------------------------------------------------


def encode(request: InternalRequest, model: str) -> dict[str, JSON]:
    items = [p if isinstance(p, str) else list(p) for p in request.prompts]
    body: dict[str, JSON] = {"model": model, "input": items[0] if len(items) == 1 else items}
    body["encoding_format"] = "float"
    if request.embedding is not None and request.embedding.dimensions is not None:
        body["dimensions"] = request.embedding.dimensions
    if request.user is not None:
        body["user"] = openai_user(request.user)
    return body


def decode(data: JSON, count: int) -> Completion:
    """An upstream's list of embeddings, in input order, checked: one vector of numbers per input."""
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list) or len(rows) != count:
        raise UpstreamMalformed(f"upstream embeddings answer does not hold {count} embedding(s)")
    vectors: list[list[float] | None] = [None] * count
    for i, row in enumerate(rows):
        vector = row.get("embedding") if isinstance(row, dict) else None
        index = row.get("index", i) if isinstance(row, dict) else i
        if (
            not isinstance(vector, list)
            or not isinstance(index, int)
            or not 0 <= index < count
            or vectors[index] is not None  # twice: another input would be left without its vector
            or not all(type(x) in (float, int) for x in vector)
        ):
            raise UpstreamMalformed("upstream embedding is not a list of numbers at a valid index")
        vectors[index] = [float(x) for x in vector]
    return Completion(
        id="",
        created=0,
        model=str(data.get("model") or ""),
        choices=[],
        usage=usage_from(data.get("usage")),
        embeddings=[v for v in vectors if v is not None],  # all of them: each index came once
    )


def _no_stream(request: InternalRequest) -> StreamEncoder:
    raise InvalidRequest("embeddings are not streamed")  # parse never sets ``stream``


EMBEDDINGS = SinglePathDialect("embeddings", parse, render, _no_stream)
