"""Hostile bodies at the dialect edge (issue 24): each is refused with a 4xx that names the field in
the client's dialect, before any upstream call and without holding memory or the event loop."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from gateway.core import caps
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, BY_NAME, INGRESSES, KEY, Ingress

FRIENDLI = {**BEARER, "X-Friendli-Team": "team1", "Content-Type": "application/json"}
SGP = {"x-api-key": KEY, "x-selected-account-id": "team1", "Content-Type": "application/json"}
OPENAI = {**BEARER, "Content-Type": "application/json"}


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> Any:
    server = await upstream("openai")
    gw: Any = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    gw.upstream = server  # what the gateway was sent
    return gw


async def post(gw: Any, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    # aiohttp sends a large body from a stream, not a bytes object
    async with gw.session.post(gw.url + path, data=io.BytesIO(data), headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def calls(gw: Any) -> list[Any]:
    """The completions the fake upstream was asked for."""
    return [r for r in gw.upstream.requests if r.method == "POST"]


def names(reply: Any, field: str) -> bool:
    """The error names ``field`` the way the client's dialect names a field."""
    if "detail" in reply:  # SGP: FastAPI's envelope
        return any(d["loc"][1:2] == [field.split(".")[0].split("[")[0]] for d in reply["detail"])
    error = reply if reply.get("object") == "error" else reply["error"]  # OctoAI's, or OpenAI's
    return bool(error["param"]) and error["param"].startswith(field) and field in error["message"]


# --- 3: an unknown field's name is kept, capital or not ------------------------------------------


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_a_capitalised_unknown_field_is_named(gw: Any, ingress: Ingress) -> None:
    path, headers, body = ingress.request("m", "x", False, Temperature=1)
    status, reply = await post(gw, path, headers, body)
    assert status in (400, 422) and names(reply, "Temperature"), reply
    assert "''" not in json.dumps(reply)


# --- 4: choice counts and seed lists are bounded, and so is a fan-out -----------------------------


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/serverless/v1/completions", FRIENDLI),
        ("/dedicated/v1/completions", FRIENDLI),
        ("/v4/beta/completions", SGP),
        ("/v5/completions", SGP),
        ("/v1/completions", OPENAI),
        ("/serverless/v1/chat/completions", FRIENDLI),
        ("/v5/chat/completions", SGP),
    ],
)
async def test_a_choice_count_past_the_cap_is_refused_on_every_path(
    gw: Any, path: str, headers: dict[str, str]
) -> None:
    body: dict[str, Any] = {"model": "m", "n": 1_000_000}
    body |= {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}
    status, reply = await post(gw, path, headers, body)
    assert status in (400, 422) and names(reply, "n"), reply
    status, _ = await post(gw, path, headers, body | {"n": caps.MAX_CHOICES})
    assert status == 200
    assert len(calls(gw)) == 1


async def test_a_long_seed_list_makes_no_upstream_call(gw: Any) -> None:
    body = {"model": "m", "prompt": "x", "seed": list(range(20_000))}
    status, reply = await post(gw, "/serverless/v1/completions", FRIENDLI, body)
    assert status == 400 and names(reply, "seed") and str(caps.MAX_CHOICES) in reply["message"], reply
    body["seed"] = list(range(caps.MAX_CHOICES + 1))
    assert (await post(gw, "/serverless/v1/completions", FRIENDLI, body))[0] == 400
    assert calls(gw) == []


async def test_batch_prompts_times_choices_is_bounded(gw: Any) -> None:
    body = {"model": "m", "prompt": ["a", "b", "c"], "n": 50}
    status, reply = await post(gw, "/v1/completions", OPENAI, body)
    assert status == 400 and names(reply, "n"), reply


# --- 5: memory and the event loop: token-id prompts, maps and bodies of many values ----------------


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5": the peak RSS starts again from the current RSS
        f.write("5")


async def test_a_body_of_millions_of_values_is_refused_before_parsing(gw: Any) -> None:
    body = b'{"model":"m","prompt":[' + b",".join([b"1"] * 4_000_000) + b"]}"
    assert len(body) > 7 * 2**20
    reset_peak_rss()
    before = peak_rss()
    status, reply = await post(gw, "/v1/completions", OPENAI, body)
    growth = peak_rss() - before
    print(f"peak RSS growth {growth / 2**20:.1f} MiB for a {len(body) / 2**20:.1f} MiB body")
    assert status == 413 and "JSON values" in reply["error"]["message"], reply
    # The body itself is held (by aiohttp's reader and as one bytes object); parsing it held 130 times
    # its size.
    assert growth < 4 * len(body), growth
    assert calls(gw) == []


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("prompt", list(range(caps.MAX_TOKEN_IDS + 1)), "prompt"),
        ("prompt", [[1] * 20_000, [2] * 20_000], "prompt[1]"),
        ("prompt", [1, caps.MAX_TOKEN_ID + 1], "prompt"),
        ("prompt", [1, -1], "prompt"),
        ("prompt", [1, "a", 2], "prompt"),
        ("stop_token_ids", [2**40], "stop_token_ids"),
        ("logit_bias", {str(i): 1 for i in range(caps.MAX_LOGIT_BIAS + 1)}, "logit_bias"),
        ("logit_bias", {str(2**40): 1}, "logit_bias"),
        ("stop", ["a"] * (caps.MAX_ITEMS + 1), "stop"),
        ("user", "u" * (caps.MAX_NAME + 1), "user"),
    ],
)
async def test_token_ids_and_maps_past_their_caps_are_refused(gw: Any, field: str, value: Any, named: str) -> None:
    status, reply = await post(gw, "/v1/completions", OPENAI, {"model": "m", "prompt": "x", field: value})
    assert status == 400 and names(reply, named), reply
    assert calls(gw) == []


async def test_a_token_prompt_within_the_cap_is_served(gw: Any) -> None:
    status, reply = await post(gw, "/v1/completions", OPENAI, {"model": "m", "prompt": [7] * caps.MAX_TOKEN_IDS})
    assert status == 200, reply
    assert calls(gw)[-1].body["prompt"] == [7] * caps.MAX_TOKEN_IDS


# --- 7: non-finite numbers are not JSON: refused anywhere in a body --------------------------------


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e400"])
@pytest.mark.parametrize(
    ("path", "headers", "body", "field"),
    [
        ("/v1/completions", OPENAI, '{"model":"m","prompt":"x","repetition_penalty":%s}', "repetition_penalty"),
        ("/serverless/v1/completions", FRIENDLI, '{"model":"m","prompt":"x","temperature":%s}', "temperature"),
        ("/dedicated/v1/completions", FRIENDLI, '{"model":"m","prompt":"x","encoder_repetition_penalty":%s}', ""),
        ("/v4/beta/completions", SGP, '{"model":"m","prompt":"x","inference_extra_params":{"a":[%s]}}', ""),
        (
            "/v1/chat/completions",
            OPENAI,
            '{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"k":%s}}',
            "",
        ),
        (
            "/v5/chat/completions",
            SGP,
            '{"model":"m","messages":[{"role":"user","content":"x"}],"guided_json":{"maximum":%s}}',
            "",
        ),
    ],
)
async def test_non_finite_numbers_are_refused_naming_the_field(
    gw: Any, token: str, path: str, headers: dict[str, str], body: str, field: str
) -> None:
    data = (body % token).encode()
    status, reply = await post(gw, path, headers, data)
    expected = (
        field
        or {
            "/dedicated/v1/completions": "encoder_repetition_penalty",
            "/v4/beta/completions": "inference_extra_params.a[0]",
            "/v1/chat/completions": "metadata.k",
            "/v5/chat/completions": "guided_json.maximum",
        }[path]
    )
    assert status in (400, 422) and names(reply, expected), reply
    assert "finite" in json.dumps(reply)
    assert calls(gw) == []


async def test_a_friendli_client_reads_the_error(gw: Any) -> None:
    """Friendli's envelope: a top-level ``message`` and OpenAI's ``error`` (dialects.md §2.8)."""
    status, reply = await post(gw, "/serverless/v1/completions", FRIENDLI, b'{"model":"m","prompt":"x","top_k":NaN}')
    assert status == 400 and reply["message"] == reply["error"]["message"] and reply["error"]["param"] == "top_k"
    octo = {**BY_NAME["octoai"].headers, "Content-Type": "application/json"}
    status, reply = await post(gw, "/v1/completions", octo, b'{"model":"m","prompt":"x","min_p":Infinity}')
    assert status == 400 and reply["object"] == "error" and reply["param"] == "min_p", reply


# --- values an engine refuses are refused here first, naming the field ----------------------------


@pytest.mark.parametrize(
    ("path", "headers", "extra", "field"),
    [
        ("/v5/completions", SGP, {"guided_choice": []}, "guided_choice"),
        ("/v5/chat/completions", SGP, {"guided_choice": []}, "guided_choice"),
        ("/v1/completions", OPENAI, {"structured_outputs": {"choice": []}}, "structured_outputs"),
    ],
)
async def test_an_empty_choice_constraint_is_refused_before_the_upstream(
    gw: Any, path: str, headers: dict[str, str], extra: dict[str, Any], field: str
) -> None:
    """vLLM refuses a choice constraint with no choices; forwarded, its 400 named no field of the
    client's (found by the ingress fuzzer)."""
    message = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    status, reply = await post(gw, path, headers, {"model": "m", "max_tokens": 4, **message, **extra})
    assert status in (400, 422) and names(reply, field), reply
    assert calls(gw) == []


async def test_friendli_beam_search_is_answered_by_a_vllm_shaped_upstream(gw: Any) -> None:
    """``num_beams`` goes to vLLM as ``use_beam_search`` with ``n`` beams at temperature 0, which vLLM
    (and the fake that follows it) serves; found by the ingress fuzzer when the fake did not."""
    body = {"model": "m", "prompt": "hi", "max_tokens": 4, "num_beams": 2}
    status, reply = await post(gw, "/serverless/v1/completions", FRIENDLI, body)
    assert status == 200, reply
    (sent,) = calls(gw)
    assert sent.body["use_beam_search"] is True and sent.body["n"] == 2
    assert len(reply["choices"]) == 1  # the best beam, as Friendli answered


# --- a content part of no type a target takes -----------------------------------------------------

OCTO = {**BY_NAME["octoai"].headers, "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/chat/completions", OPENAI),
        ("/serverless/v1/chat/completions", FRIENDLI),
        ("/v5/chat/completions", SGP),
        ("/v1/chat/completions", OCTO),
    ],
    ids=["openai", "friendli", "sgp", "octoai"],
)
@pytest.mark.parametrize("part", [{"type": "bogus"}, {}], ids=["bogus", "untyped"])
async def test_a_content_part_of_no_known_type_is_refused_naming_it(
    gw: Any, path: str, headers: dict[str, str], part: dict[str, Any]
) -> None:
    """Passed on, it was answered 200 by an upstream that read it as nothing; OpenAI's API refuses
    it with 400, param ``messages[0].content[0].type``."""
    body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [part]}]}
    status, reply = await post(gw, path, headers, body)
    assert status in (400, 422) and names(reply, "messages"), reply
    assert "messages[0].content[0].type" in json.dumps(reply), reply
    assert calls(gw) == []
