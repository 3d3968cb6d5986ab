"""Raw HTTP clients for each ingress dialect, as its SDK would send, and readers of its answers —
for tests that need exact bytes (the SDK tier runs the real SDKs separately)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

JSON = Any
KEY = "gw-key-0123456789"


@dataclass
class Answer:
    status: int
    text: str
    finish: str | None
    usage: JSON
    raw: bytes
    body: JSON = None
    done: bool = False


@dataclass(frozen=True)
class Ingress:
    name: str
    path: str
    headers: dict[str, str]
    extra: dict[str, JSON]
    done: bool = True  # streams end with [DONE]

    def request(self, model: str, prompt: str, stream: bool, **fields: JSON) -> tuple[str, dict[str, str], JSON]:
        body: dict[str, JSON] = {"model": model, "prompt": prompt, "max_tokens": 4, **self.extra, **fields}
        body["stream"] = stream
        if stream and self.name in ("openai", "friendli", "octoai", "sgp5"):
            body["stream_options"] = {"include_usage": True}
        return self.path, {"Content-Type": "application/json", **self.headers}, body


BEARER = {"Authorization": f"Bearer {KEY}"}
INGRESSES = [
    Ingress("openai", "/v1/completions", BEARER, {}),
    Ingress("friendli", "/serverless/v1/completions", {**BEARER, "X-Friendli-Team": "team1"}, {}),
    Ingress(
        "friendli2024",
        "/v1/completions",
        {**BEARER, "X-Friendli-Team": "team1"},
        {"timeout_microseconds": None, "num_beams": None, "tokens": None, "seed": None},
    ),
    Ingress("sgp", "/v4/beta/completions", {"x-api-key": KEY, "x-selected-account-id": "team1"}, {}, done=False),
    Ingress("sgp5", "/v5/completions", {"x-api-key": KEY, "x-selected-account-id": "team1"}, {}, done=False),
    Ingress("octoai", "/v1/completions", {**BEARER, "X-Fern-SDK-Name": "octoai"}, {}),
]
BY_NAME = {i.name: i for i in INGRESSES}


def frames(raw: bytes) -> list[str]:
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in block.decode().split("\n") if line]
        assert all(line.startswith(("data: ", "event: ")) for line in lines), lines
        out += [line[6:] for line in lines if line.startswith("data: ")]
    return out


def read(ingress: Ingress, status: int, raw: bytes, stream: bool) -> Answer:
    if status != 200 or not stream:
        body = json.loads(raw)
        if status != 200:
            return Answer(status, "", None, None, raw, body)
        choice = body["choices"][0]
        return Answer(status, choice["text"], choice.get("finish_reason"), body.get("usage"), raw, body)
    datas = frames(raw)
    done = bool(datas) and datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas if d != "[DONE]"]
    if ingress.name == "friendli2024":
        text = "".join(c["text"] for c in chunks if c.get("event") == "token_sampled")
        complete = chunks[-1]
        assert complete["event"] == "complete", complete
        choice = complete["choices"][0]
        assert choice["text"] == text
        return Answer(status, text, choice.get("finish_reason"), complete.get("usage"), raw, chunks, done)
    text, finish, usage = "", None, None
    for c in chunks:
        if "error" in c or c.get("object") == "error":
            return Answer(status, text, "error", None, raw, c, done)
        for ch in c.get("choices", []):
            text += ch.get("text", "")
            finish = ch.get("finish_reason") or finish
        usage = c.get("usage") or usage
    return Answer(status, text, finish, usage, raw, chunks, done)


def without_team(ingress: Ingress) -> Ingress:
    """The same client with no team header: its key's first team is used."""
    teams = ("x-friendli-team", "x-selected-account-id", "openai-organization")
    headers = {k: v for k, v in ingress.headers.items() if k.lower() not in teams}
    return Ingress(ingress.name, ingress.path, headers, ingress.extra, ingress.done)
