"""``POST /v1/messages/count_tokens``: Anthropic's prompt-size question, answered from the request the
body would be, with the bound admission reserves by (``limits.plan.estimate_prompt``, an upper bound:
a token per byte): every message, system block, tool result and tool schema is in that request. No
upstream is called, so no limit is charged; the key, the team and the model's allow-list are checked
as for a generation.
"""

from __future__ import annotations

from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.core.request import Operation
from gateway.dialects import ANTHROPIC
from gateway.dialects.common import dumps, loads
from gateway.limits.plan import estimate_prompt
from gateway.web.body import read_body
from gateway.web.pipeline import credentials, error_response, request_id
from gateway.web.state import GATEWAY


async def count_tokens(request: web.Request) -> web.Response:
    gen = request.app[GATEWAY].gen
    rid = request_id(request.headers)
    try:
        data = loads(await read_body(request))
        dialect = ANTHROPIC.select(data, request.headers)
        token, team = credentials(dialect, request.headers)
        principal = await gen.auth.authenticate(token, team)
        ireq = dialect.parse(Operation.CHAT, data, "count_tokens")
        gen.models.resolve(ireq.model)
        gen.model_access.check(principal, ireq.model)
    except GatewayError as err:
        return error_response(ANTHROPIC, err, rid)
    body = dumps({"input_tokens": estimate_prompt(ireq)})
    return web.Response(body=body, content_type="application/json", headers={"X-Request-Id": rid})
