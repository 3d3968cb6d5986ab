"""``llm-gateway serve`` as a user runs it: the embedded default (no config) in front of a local
"vLLM", and ``--workers 2`` sharing one port."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.runtime.config import hash_key
from tests.fakes import upstream as fake
from tests.integration.conftest import serve as serve  # the fixture, where other tests import it from
from tests.support import eventually
from tests.support.gateways import ROOT, Served
from tests.support.gateways import free_port as free_port  # the old names, while other tests import them here
from tests.support.gateways import wait_healthy as wait_healthy

K = 20


def end(proc: subprocess.Popen[bytes]) -> None:
    """The old way to stop a started gateway (``Served.stop_blocking`` now), while tests call it here;
    its pipes, if any, closed."""
    Served("", proc, Path(os.devnull)).stop_blocking()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


PACED = "auth: none\nmodels:\n  - name: m\n    targets: [{provider: mock, engine: {tokens_per_second: 20}}]\n"


async def test_embedded_default_serves_local_vllm(serve: Any) -> None:
    local = await fake.start("openai")
    try:
        url = (await serve([], {"VLLM_BASE_URL": local.url, "LLM_GATEWAY_API_KEY": "k-embedded"})).url
        headers = {"Authorization": "Bearer k-embedded"}
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/v1/models", headers=headers) as resp:
                names = [m["id"] for m in (await resp.json())["data"]]
            assert names == ["demo", "up-model"]
            body = {"model": "up-model", "prompt": "hello", "max_tokens": 3}
            async with session.post(url + "/v1/completions", json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                answer = await resp.json()
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 401
        assert answer["choices"][0]["text"] == fake.expected("hello", 3)
    finally:
        await local.close()


async def test_two_workers_share_a_port_and_their_metrics(serve: Any, tmp_path: Path) -> None:
    local = await fake.start("openai", api_key="upstream-key")
    try:
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(
            "models:\n  - name: m\n    targets:\n"
            f"      - {{provider: openai, base_url: '{local.url}', api_key_env: UP_KEY}}\n"
            f"teams:\n  - id: t\n    keys: [{{id: k, sha256: {hash_key('k2')}}}]\n"
            "redis: {url: 'redis://127.0.0.1:6379'}\n"  # workers share keys and limits through it
        )
        gw = await serve(["--config", str(cfg), "--workers", "2"], {"UP_KEY": "upstream-key"})
        url = gw.url
        ids = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            headers = {"Authorization": "Bearer k2"}
            for i in range(K):
                body = {"model": "m", "prompt": "x", "stream": i % 2 == 1}
                async with session.post(
                    url + "/v1/completions", json=body, headers={**headers, "X-Request-Id": f"req-{i}"}
                ) as r:
                    assert r.status == 200
                    await r.read()
                    ids.append(r.headers["X-Request-Id"])
                    assert float(r.headers["X-Gateway-Overhead-Ms"]) >= 0
            async with session.post(url + "/v1/completions", json={"model": "m"}, headers=headers) as r:
                assert r.status == 400

            async def every_request_counted() -> str:
                """Histograms are observed at once, counters flushed by each worker's tally loop at least
                every second (gateway.obs.metrics): both kinds show every request."""
                async with session.get(url + "/metrics") as r:
                    text = await r.text()
                ok = [ln.rsplit(" ", 1)[1] for ln in text.splitlines() if 'outcome="ok"' in ln]
                seen = f'gateway_overhead_seconds_count{{dialect="openai"}} {K + 1}.0' in text and f"{K}.0" in ok
                return text if seen else ""

            text = await eventually(every_request_counted, "every request in both workers' metrics")
        children = subprocess.run(["pgrep", "-P", str(gw.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 2
    finally:
        await local.close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    ok = (("dialect", "openai"), ("model", "m"), ("outcome", "ok"), ("provider", "openai"), ("team", "t"))
    bad = (("dialect", "openai"), ("model", "-"), ("outcome", "client_error"), ("provider", "-"), ("team", "t"))
    assert samples[("gateway_requests_total", ok)] == K
    assert samples[("gateway_requests_total", bad)] == 1
    assert samples[("gateway_tokens_total", (("kind", "completion"), ("model", "m"), ("team", "t")))] > 0
    assert samples[("gateway_ttft_seconds_count", (("dialect", "openai"), ("model", "m")))] == K // 2
    assert samples[("gateway_overhead_seconds_count", (("dialect", "openai"),))] == K + 1
    assert not any("k2" in v or "req-" in v for _, labels in samples for _, v in labels)
    err = await gw.stop()
    requests = [line for line in gw.log_lines() if line.get("event") == "request"]
    assert sorted(r["request_id"] for r in requests if r["status"] == 200) == sorted(ids)
    assert "k2" not in err and "Bearer" not in err


def test_workers_without_redis_are_refused_in_one_line(tmp_path: Path) -> None:
    """Keys and limits in each worker apart would split silently: refused, saying how to fix it."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text("models:\n  - name: m\n    targets: [{provider: vllm, base_url: 'http://127.0.0.1:9/v1'}]\n")
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--workers", "2", "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "needs redis" in line and "redis.url" in line


async def test_sigterm_drains_streams_and_cuts_the_rest_in_their_dialect(serve: Any, tmp_path: Path) -> None:
    """SIGTERM: the listener closes at once; a stream that ends within the drain period ends cleanly; one
    that would run past it is cut there with the dialect's in-band error, never a clean end."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(PACED)
    gw = await serve(["--config", str(cfg), "--drain-seconds", "3"], {})
    url, proc = gw.url, gw.proc
    async with aiohttp.ClientSession() as session:

        async def stream(tokens: int, started: asyncio.Event) -> str:
            body = {"model": "m", "prompt": "drain", "max_tokens": tokens, "ignore_eos": True, "stream": True}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                seen = [await resp.content.readline()]
                started.set()
                seen.append(await resp.content.read())
                return b"".join(seen).decode()

        short_started, long_started = asyncio.Event(), asyncio.Event()
        short = asyncio.create_task(stream(30, short_started))  # 1.5 s at 20 tokens/s
        long = asyncio.create_task(stream(400, long_started))  # 20 s: past the drain
        await asyncio.wait_for(asyncio.gather(short_started.wait(), long_started.wait()), 30)
        proc.send_signal(signal.SIGTERM)
        short_body, long_body = await asyncio.wait_for(asyncio.gather(short, long), 30)
    assert short_body.rstrip().endswith("data: [DONE]") and "error" not in short_body
    assert "shutting down" in long_body and '"finish_reason":"length"' not in long_body.replace(" ", "")
    assert await asyncio.to_thread(proc.wait, 30) == 0
    with pytest.raises(aiohttp.ClientConnectionError):  # the listener closed with the signal
        async with aiohttp.ClientSession() as session, session.get(url + "/ready"):
            pass


async def test_a_request_on_a_keep_alive_connection_during_the_drain_gets_503_at_once(
    serve: Any, tmp_path: Path
) -> None:
    """A connection opened before SIGTERM stays open through the drain: a request on it is answered 503
    ``shutting_down`` in its dialect (and the connection closed after it) while a stream still holds the
    drain, rather than no answer until the drain ends."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(PACED)
    url, proc = await serve(["--config", str(cfg), "--drain-seconds", "60"], {})
    async with (
        aiohttp.ClientSession() as streams,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1)  # one connection, kept alive: never a new one
        ) as kept,
    ):
        async with kept.get(url + "/ready") as resp:
            assert resp.status == 200
        started = asyncio.Event()

        async def hold() -> None:
            body = {"model": "m", "prompt": "drain", "max_tokens": 2000, "ignore_eos": True, "stream": True}
            async with streams.post(url + "/v1/completions", json=body) as resp:
                await resp.content.readline()
                started.set()
                await resp.content.read()

        holding = asyncio.create_task(hold())  # 100 s at 20 tokens/s: it holds the whole drain
        await asyncio.wait_for(started.wait(), 30)
        proc.send_signal(signal.SIGTERM)
        while True:  # on the kept connection, until the drain has begun
            async with kept.get(url + "/ready") as resp:
                if resp.status == 503:
                    break
        body = {"model": "m", "prompt": "late", "max_tokens": 4}
        async with kept.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 503 and resp.headers["Connection"] == "close"
            assert (await resp.json())["error"]["code"] == "shutting_down"
        assert not holding.done()  # answered while the drain still runs: at once, not at its end
        proc.kill()
        await asyncio.gather(holding, return_exceptions=True)


def cli(args: list[str], env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``llm-gateway ARGS`` in a process of its own, with the admin key variable unset unless given."""
    base = {k: v for k, v in os.environ.items() if k != "LLM_GATEWAY_ADMIN_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "auth: none\nmodels: [{name: m, targets: [{provider: openai, base_url: 'http://127.0.0.1:9', "
            "api_key_env: GW_TEST_UNSET}]}]\n",
            "models['m'].targets[0].api_key_env: environment variable GW_TEST_UNSET is not set",
        ),
        (
            "models: [{name: m, targets: [{provider: mock}]}]\nteams: [{id: t}]\n",
            "teams: no team has a key and no admin key (LLM_GATEWAY_ADMIN_KEY) is set to issue one",
        ),
    ],
)
def test_serve_refuses_what_would_fail_later_before_listening(tmp_path: Path, text: str, expected: str) -> None:
    """An unset credential variable would be a 502 on the first request, a keyless config a 401 to all."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(text)
    port = free_port()
    done = cli(["serve", "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)])
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"{cfg}: ") and expected in line, line
    assert cli(["check-config", str(cfg)]).stderr.strip() == line  # the same check, the same words


@pytest.mark.parametrize("reuse_port", [False, True], ids=["another-server", "another-gateway"])
def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path: Path, reuse_port: bool) -> None:
    """Another gateway listens with SO_REUSEPORT, as ours does: the port must count as taken all the same,
    not be shared silently with a stranger."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text("auth: none\nmodels: [{name: m, targets: [{provider: mock}]}]\n")
    with socket.socket() as taken:
        if reuse_port:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(["serve", "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)])
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == f"error: cannot listen on 127.0.0.1:{port}: address already in use (choose another --port)"


def test_output_piped_to_head_ends_without_a_traceback(tmp_path: Path) -> None:
    """``check-config FILE | head -1``: more output than the pipe holds, so that the reader is gone while
    the gateway still writes."""
    cfg = tmp_path / "gw.yaml"
    models = "".join(f"  - {{name: model-{i}, targets: [{{provider: mock}}]}}\n" for i in range(4000))
    cfg.write_text(f"auth: none\nmodels:\n{models}")
    done = subprocess.run(
        f"'{sys.executable}' -m gateway check-config '{cfg}' | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == f"{cfg}: OK\n"
    assert done.stderr == ""


def test_every_option_says_what_it_does_and_its_default() -> None:
    import argparse
    from collections.abc import Iterator

    from gateway.cli import parser

    def commands(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from commands(sub)

    checked = 0
    for command in commands(parser()):
        for action in command._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{command.prog} {action.dest}: no help text"
            if action.option_strings:
                said = "(default: " in action.help or (action.required and "required" in action.help)
                assert said, f"{command.prog} {action.option_strings[0]}: no default in {action.help!r}"
                checked += 1
    assert checked > 10
    usage = next(c for c in commands(parser()) if c.prog.endswith("teams usage"))
    assert "(default: 24)" in " ".join(usage.format_help().split())


ADMIN = "admin-key-for-cli-tests"
TEAM_CONFIG = "models: [{name: m, aliases: [m-alias], targets: [{provider: mock}]}]\nteams: [{id: t}, {id: u}]\n"
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


async def test_text_logs_open_with_one_summary_line_and_end_with_one(serve: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(TEAM_CONFIG)
    gw = await serve(
        ["--config", str(cfg), "--log-format", "text", "--drain-seconds", "7"], {"LLM_GATEWAY_ADMIN_KEY": ADMIN}
    )
    url, err = gw.url, await gw.stop()
    lines = err.splitlines()
    assert not any(line.startswith("{") for line in lines), lines
    (summary,) = [line for line in lines if " serving " in line]
    pid = rf"\[{gw.pid}\]"  # one process here: the gateway's own
    assert re.fullmatch(rf"{STAMP} INFO    gateway{pid} serving event=start listen={url} .*", summary), summary
    for field in ("models=m,m-alias", "model_count=1", "teams=2", "redis=none", "workers=1", "drain_seconds=7.0"):
        assert f" {field}" in summary, (field, summary)
    (shutdown,) = [line for line in lines if " shut down " in line]
    assert re.fullmatch(rf"{STAMP} INFO    gateway{pid} shut down event=shutdown in_flight=0 cut=0 .*", shutdown)
    assert ADMIN not in err


async def test_admin_actions_are_audited_and_the_cli_shows_tables_or_json(serve: Any, tmp_path: Path) -> None:
    """Key create and revoke through the admin API each log one audit line naming the admin credential
    by its digest's first 8 hex, never the admin key nor the issued secret; ``keys list`` is a table,
    or the gateway's JSON with ``--json``; a wrong admin key is said in those words."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(TEAM_CONFIG)
    gw = await serve(["--config", str(cfg), "--log-format", "json"], {"LLM_GATEWAY_ADMIN_KEY": ADMIN})
    url, headers = gw.url, {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as session:
        body = {"teams": ["t", "u"], "name": "ci bot"}
        async with session.post(url + "/admin/keys", json=body, headers=headers) as resp:
            assert resp.status == 201, await resp.text()
            issued = await resp.json()
    admin_env = {"LLM_GATEWAY_ADMIN_KEY": ADMIN}
    listed = await asyncio.to_thread(cli, ["keys", "list", "--url", url], admin_env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "TEAMS", "CREATED", "EXPIRES", "STATE"]
    assert row.startswith(issued["id"]) and "ci bot" in row and " t,u " in row and row.endswith("active")
    assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +never ", row), row
    as_json = await asyncio.to_thread(cli, ["keys", "list", "--url", url, "--json"], admin_env)
    public = {k: v for k, v in issued.items() if k not in ("key", "stored", "warning")}  # said once, at issue
    assert json.loads(as_json.stdout)["keys"] == [public]
    revoked = await asyncio.to_thread(cli, ["keys", "revoke", issued["id"], "--url", url], admin_env)
    assert revoked.stdout == f"revoked key {issued['id']} (teams: t, u)\n", revoked.stderr
    wrong = await asyncio.to_thread(cli, ["keys", "list", "--url", url], {"LLM_GATEWAY_ADMIN_KEY": "not-it"})
    assert (wrong.returncode, wrong.stdout) == (1, "")
    assert wrong.stderr == f"error: invalid admin key (refused by {url})\n"
    text = await gw.stop()
    audits = [line for line in gw.log_lines() if line.get("event") == "audit"]
    who = hash_key(ADMIN)[:8]
    assert [(a["action"], a["admin"], a["key_id"], a["teams"]) for a in audits] == [
        ("key.create", who, issued["id"], ["t", "u"]),
        ("key.revoke", who, issued["id"], ["t", "u"]),
    ]
    assert all(a["logger"] == "gateway.audit" and re.fullmatch(STAMP, a["ts"]) for a in audits)
    assert issued["key"] not in text and issued["key"].removeprefix("gwk_") not in text and ADMIN not in text
