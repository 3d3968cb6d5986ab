"""Whose envelope a request no route takes is answered in (``routes.OWNERS``): the dialect owning its
path's prefix, on whole segments; on a path no prefix owns, the dialect its SDK's headers name, else
OpenAI's. The table is written out, so it is checked here against the route table it must agree with:
every served path, and any path below one, belongs to the dialect that serves it.
"""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from gateway.dialects import ANTHROPIC, FRIENDLI, OCTOAI, OPENAI, RESPONSES, SGP_V4, SGP_V5
from gateway.dialects.base import Dialect
from gateway.web.routes import COUNT_TOKENS_PATH, OWNERS, ROUTES

SERVED = [(spec.path, spec.dialect) for spec in ROUTES] + [
    (COUNT_TOKENS_PATH, ANTHROPIC),
    ("/v1/responses/{id}", RESPONSES),
    ("/v1/responses/{id}/input_items", RESPONSES),
]


@pytest.mark.parametrize(("path", "dialect"), SERVED)
def test_a_served_path_and_any_below_it_belong_to_the_dialect_that_serves_it(path: str, dialect: Dialect) -> None:
    for under in (path, path + "/x", path + "/x/y"):
        assert OWNERS.of(under, {}).name == dialect.name, under


@pytest.mark.parametrize(
    ("path", "headers", "dialect"),
    [
        ("/v1/messagesx", {}, OPENAI),  # a prefix is whole segments
        ("/v4beta/completions", {}, OPENAI),
        ("/v4", {}, SGP_V4),
        ("/serverless/tools/v1/chat/completions", {}, FRIENDLI),
        ("/v1/complete", {}, ANTHROPIC),
        ("/v1/files", {"anthropic-version": "2023-06-01"}, ANTHROPIC),
        ("/nothing", {"anthropic-version": "2023-06-01"}, ANTHROPIC),
        ("/v1/x", {"X-Friendli-Team": "t"}, FRIENDLI),
        ("/v1/x", {"x-fern-sdk-name": "octoai"}, OCTOAI),
        ("/v1/x", {}, OPENAI),
        ("/v5/x", {"anthropic-version": "2023-06-01"}, SGP_V5),  # a prefix's owner, whatever the headers
    ],
)
def test_headers_name_the_dialect_only_where_no_prefix_does(
    path: str, headers: dict[str, str], dialect: Dialect
) -> None:
    assert OWNERS.of(path, CIMultiDict(headers)).name == dialect.name  # as aiohttp gives them
