"""``POST /v1/messages/count_tokens``: Anthropic's prompt-size question. The key, the team and the model's
allow-list are checked as for a generation; no limit is charged. Then the target a generation would
try first is asked, where it can count exactly (``adapters.COUNTING``): an ``anthropic`` target its own
``/v1/messages/count_tokens``, a ``vllm`` target its ``/tokenize`` (the chat template applied, so the
count is the prompt tokens its answer will report). Any other target, and any failure of that question
(refused, down, slow, malformed), is answered with the bound admission reserves by
(``limits.plan.estimate_prompt``: a token per byte of everything in the request): a count never fails
for an upstream's sake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.upstream import Call, Upstream
from gateway.dialects import ANTHROPIC
from gateway.dialects.base import id_headers
from gateway.dialects.common import dumps, loads
from gateway.limits.plan import estimate_prompt
from gateway.routing.table import Route
from gateway.runtime.throttle import LogThrottle
from gateway.web.body import read_body
from gateway.web.pipeline import credentials, error_response, request_id
from gateway.web.state import GATEWAY, Generation

throttled = LogThrottle(logging.getLogger("gateway.count_tokens"))  # one line a period per target
COUNT_SECONDS = 10.0  # the most a count waits for its target before answering with the bound
Counter = Callable[[InternalRequest, Call], Awaitable[int | None]]


async def count_tokens(request: web.Request) -> web.Response:
    gen = request.app[GATEWAY].gen
    rid = request_id(request.headers)
    try:
        data = loads(await read_body(request))
        dialect = ANTHROPIC.select(data, request.headers)
        token, team = credentials(dialect, request.headers)
        principal = await gen.auth.authenticate(token, team)
        ireq = dialect.parse(Operation.CHAT, data, "count_tokens")
        route = gen.models.resolve(ireq.model).route
        gen.model_access.check(principal, ireq.model)
    except GatewayError as err:
        return error_response(ANTHROPIC, err, rid)
    count = await exact(gen, route, ireq, rid)
    body = dumps({"input_tokens": estimate_prompt(ireq) if count is None else count})
    return web.Response(body=body, content_type="application/json", headers=id_headers(ANTHROPIC, rid))


async def exact(gen: Generation, route: Route, req: InternalRequest, rid: str) -> int | None:
    """The count of the target a generation would try first, where it can say; None otherwise."""
    try:
        upstream: Upstream = gen.models.order(route)[0]
    except GatewayError:  # every target cooling down: none to ask
        return None
    count: Counter | None = getattr(upstream, "count_tokens", None)
    if count is None:
        return None
    call = Call(rid, asyncio.get_running_loop().time() + COUNT_SECONDS, model=route.upstream_model)
    try:
        return await count(req, call)
    except GatewayError as err:
        what = "target %s could not count tokens (%s): the bound answers"
        throttled.warning(f"count:{upstream.name}", what, upstream.name, err.message)
        return None
