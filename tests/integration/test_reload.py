"""Config reload without restart, against ``llm-gateway serve`` as an operator runs it: SIGHUP and
``POST /admin/reload`` under load, a broken config refused while serving goes on, ``--workers 2``
reloading every worker, and the audit trail of it all."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.runtime.config import hash_key
from tests.fakes import upstream as fake
from tests.support import eventually
from tests.support.gateways import Gateways, Served

ADMIN = "admin-secret-for-reload"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
BOMB = (
    b"a0: &a0 [l, l, l, l, l, l, l, l]\n"
    + b"".join(b"a%d: &a%d [%s]\n" % (i, i, b", ".join([b"*a%d" % (i - 1)] * 8)) for i in range(1, 10))
    + b"models: *a9\n"
)  # billion laughs: 8 ** 10 values once expanded
LOAD_KEY, GONE_KEY, LIMITED_KEY, STEADY_KEY = "key-load", "key-gone", "key-limited", "key-steady"
CLIENTS = 4
AFTER = 15  # requests each load client sends once the reload is done
MAX_REQUESTS = 400  # the load loop's bound, whatever happens


def config(upstream: str, *, new_model: bool = False, extra: str = "") -> str:
    """v1 serves ``m`` and ``old`` (a target of its own); v2 (``new_model``) adds ``m2``, removes
    ``old`` and the key ``gone/k``, and gives team ``limited`` an rpm limit; ``steady``'s limit
    (2 a minute) is the same in both."""
    target = f"{{provider: openai, base_url: '{upstream}', api_key_env: UP_KEY}}"
    models = f"  - name: m\n    targets: [{target}]\n"
    if new_model:
        m2 = f"{{provider: openai, base_url: '{upstream}', model: m, api_key_env: UP_KEY}}"
        models += f"  - name: m2\n    targets: [{m2}]\n"
    else:
        old = f"{{provider: openai, base_url: '{upstream}', model: m, api_key_env: UP_KEY, name: old-target}}"
        models += f"  - name: old\n    targets: [{old}]\n"
    gone = "" if new_model else f"\n  - id: gone\n    keys: [{{id: k, sha256: {hash_key(GONE_KEY)}}}]"
    limited = "\n    limits: {rpm: 1}" if new_model else ""
    return (
        f"models:\n{models}"
        "teams:\n"
        f"  - id: load\n    keys: [{{id: k, sha256: {hash_key(LOAD_KEY)}}}]"
        f"{gone}"
        f"\n  - id: limited\n    keys: [{{id: k, sha256: {hash_key(LIMITED_KEY)}}}]{limited}"
        f"\n  - id: steady\n    keys: [{{id: k, sha256: {hash_key(STEADY_KEY)}}}]\n    limits: {{rpm: 2}}\n"
        f"admin: {{key_sha256: {hash_key(ADMIN)}}}\n{extra}"
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """``llm-gateway serve`` with JSON log lines and the upstream's key in its environment."""
    started = Gateways(tmp_path)

    async def start(cfg: Path, *args: str) -> Served:
        env = {"UP_KEY": "upstream-key", "LLM_GATEWAY_LOG_FORMAT": "json"}
        return await started.start("--config", str(cfg), *args, env=env)

    yield start
    await started.close()


async def ask(session: aiohttp.ClientSession, url: str, key: str, model: str = "m", stream: bool = False) -> int:
    body = {"model": model, "prompt": "hello", "max_tokens": 4, "stream": stream}
    async with session.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        await r.read()
        return r.status


async def config_info(session: aiohttp.ClientSession, url: str) -> dict[tuple[str, ...], float]:
    """``gateway_config_info`` samples: (version, hash[, pid]) → value."""
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    return {
        tuple(v for _, v in sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gateway_config_info"
    }


async def metric(session: aiohttp.ClientSession, url: str, name: str, **labels: str) -> float:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(found)


async def answers(session: aiohttp.ClientSession, url: str, model: str, status: int) -> bool:
    return await ask(session, url, LOAD_KEY, model) == status


def log_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_reload_under_load_fails_nothing_but_what_the_change_refuses(served: Any, tmp_path: Path) -> None:
    """A new model, a removed model and key, a changed limit, applied by ``POST /admin/reload`` while
    clients keep sending: none of their requests fails; a stream in flight on the removed model's
    target runs to its end; the unchanged team's limit counters carry over."""
    async with await fake.start("openai", models=["m"], api_key="upstream-key") as upstream:
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(config(upstream.url))
        gw = await served(cfg)
        url = gw.url
        async with aiohttp.ClientSession() as session:
            assert [await ask(session, url, STEADY_KEY) for _ in range(2)] == [200, 200]
            assert await ask(session, url, GONE_KEY) == 200
            async with session.post(url + "/admin/keys", json={"teams": ["gone"]}, headers=ADMIN_HEADERS) as r:
                issued = (await r.json())["key"]  # outlives its team: refused once the team is gone
            assert await ask(session, url, issued) == 200
            before = await config_info(session, url)
            reloaded = asyncio.Event()
            statuses: list[int] = []

            async def load(stream: bool) -> None:
                after = 0
                while after < AFTER and len(statuses) < MAX_REQUESTS:
                    statuses.append(await ask(session, url, LOAD_KEY, stream=stream))
                    after += reloaded.is_set()

            clients = [asyncio.create_task(load(i % 2 == 1)) for i in range(CLIENTS)]
            # A stream on ``old`` (removed by the reload) that is still running when the reload is done.
            body = {"model": "old", "prompt": "[[fault:slow=0.2]] hello", "max_tokens": 8, "stream": True}
            async with session.post(
                url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {LOAD_KEY}"}
            ) as slow:
                assert slow.status == 200
                await slow.content.readline()  # its first event: the stream is under way
                await eventually(lambda: len(statuses) >= CLIENTS, "the load under way")
                cfg.write_text(config(upstream.url, new_model=True))
                async with session.post(url + "/admin/reload", headers=ADMIN_HEADERS) as r:
                    assert r.status == 200, await r.text()
                    answer = await r.json()
                reloaded.set()
                assert upstream.active >= 1  # the removed model's stream outlived the swap
                rest = (await slow.read()).decode()
            assert rest.rstrip().endswith("data: [DONE]") and '"error"' not in rest
            await asyncio.gather(*clients)
            assert statuses.count(200) == len(statuses) and len(statuses) >= CLIENTS * AFTER, statuses
            assert answer["result"] == "applied" and answer["version"] == 2
            assert answer["changes"] == {
                "models_added": ["m2"],
                "models_removed": ["old"],
                "teams_removed": ["gone"],
                "teams_changed": ["limited"],
                "keys_removed": ["gone/k"],
            }
            # What the change itself refuses, and what it now serves.
            assert await ask(session, url, "key-load", "m2") == 200
            assert await ask(session, url, "key-load", "old") == 404
            assert await ask(session, url, GONE_KEY) == 401
            assert await ask(session, url, issued) == 401
            assert [await ask(session, url, LIMITED_KEY) for _ in range(2)] == [200, 429]
            assert await ask(session, url, STEADY_KEY) == 429  # its two of the minute were spent before
            after = await config_info(session, url)
            assert await metric(session, url, "gateway_config_reloads_total", result="applied") == 1
        ((h1, v1),) = [k for k, v in before.items() if v == 1]
        assert list(after.values()) == [1]  # the past version's series is gone, not left at 0
        ((h2, v2),) = after
        assert (v1, v2) == ("1", "2") and h1 != h2 == answer["hash"]
        text = await gw.stop()
        lines = log_lines(text)
        (audit,) = [a for a in lines if a.get("event") == "audit" and a["action"] == "config.reload"]
        assert issued not in text
        assert audit["admin"] == hash_key(ADMIN)[:8] and audit["result"] == "applied"
        assert ADMIN not in text and "upstream-key" not in text


async def test_a_broken_config_is_refused_and_the_old_one_serves_on(served: Any, tmp_path: Path) -> None:
    """By the admin API (422, the reason named as check-config names it) and by SIGHUP (logged): the
    running config serves on, and the refusal is counted and in the audit list."""
    async with await fake.start("openai", models=["m"], api_key="upstream-key") as upstream:
        cfg = tmp_path / "gw.yaml"
        good = config(upstream.url)
        cfg.write_text(good)
        gw = await served(cfg)
        url, proc = gw.url, gw.proc
        async with aiohttp.ClientSession() as session:
            cfg.write_text(good.replace("provider: openai", "provider: nope", 1))
            async with session.post(url + "/admin/reload", headers=ADMIN_HEADERS) as r:
                assert r.status == 422
                refused = await r.json()
            assert refused["result"] == "refused" and refused["version"] == 1
            assert refused["error"]["message"] == (
                f"{cfg}: models['m'].targets[0]: unknown provider 'nope' "
                "(known: anthropic, friendli, mock, octoai, openai, sgp, sgp-v4, vllm, vllm-engine)"
            )
            assert await ask(session, url, LOAD_KEY) == 200
            for raw, reason in [(b"models: [\xff]\n", "not UTF-8"), (BOMB, "aliases are expanded")]:
                cfg.write_bytes(raw)  # each refused by name, never as an internal error
                async with session.post(url + "/admin/reload", headers=ADMIN_HEADERS) as r:
                    assert r.status == 422 and reason in (await r.json())["error"]["message"]
            cfg.write_text(good + "teams: oops\n")  # the last ``teams`` wins: not a list
            proc.send_signal(signal.SIGHUP)

            async def refused_twice() -> bool:
                return await metric(session, url, "gateway_config_reloads_total", result="refused") == 4

            await eventually(refused_twice, "the SIGHUP reload refused")
            assert await ask(session, url, LOAD_KEY, stream=True) == 200
            async with session.get(url + "/admin/audit", headers=ADMIN_HEADERS) as r:
                entries = (await r.json())["entries"]
            assert [(e["admin"], e["action"], e["result"]) for e in entries] == [
                ("sighup", "config.reload", "refused"),
                *[(hash_key(ADMIN)[:8], "config.reload", "refused")] * 3,
            ]
            assert "unknown provider" in entries[3]["reason"] and entries[0]["time"].endswith("Z")
            async with session.get(url + "/admin/audit") as r:
                assert r.status == 401
        warned = [a for a in log_lines(await gw.stop()) if a.get("event") == "config_reload"]
        assert [w["result"] for w in warned] == ["refused"] * 4 and warned[3]["by"] == "sighup"


def put(path: Path, text: str) -> None:
    """Writes ``path`` as an editor or a ConfigMap update does: whole, in one rename (a watch never
    sees it half written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def test_the_file_watch_and_sighup_reload(served: Any, tmp_path: Path) -> None:
    """The watch applies a changed file (one turning the watch off); SIGHUP the next, whose change of
    ``server`` waits for a restart and is said to."""
    async with await fake.start("openai", models=["m"], api_key="upstream-key") as upstream:
        cfg = tmp_path / "gw.yaml"
        put(cfg, config(upstream.url, extra="reload: {watch: true, poll_seconds: 0.05}\n"))
        gw = await served(cfg)
        url, proc = gw.url, gw.proc
        async with aiohttp.ClientSession() as session:
            assert await ask(session, url, LOAD_KEY, "m2") == 404
            put(cfg, config(upstream.url, new_model=True, extra="reload: {watch: false}\n"))
            await eventually(lambda: answers(session, url, "m2", 200), "the watch applied the file")
            put(cfg, config(upstream.url, extra="reload: {watch: false}\nserver: {drain_seconds: 7}\n"))
            proc.send_signal(signal.SIGHUP)
            await eventually(lambda: answers(session, url, "m2", 404), "SIGHUP applied the file")
            async with session.get(url + "/admin/audit", headers=ADMIN_HEADERS) as r:
                entries = (await r.json())["entries"]
            assert [(e["admin"], e["version"]) for e in entries] == [("sighup", 3), ("watch", 2)]
            assert entries[0]["restart_needed"] == ["server"] and "restart_needed" not in entries[1]


async def test_two_workers_both_reload_from_one_admin_call(served: Any, tmp_path: Path) -> None:
    """The worker that takes ``POST /admin/reload`` signals the parent, which signals both workers:
    each worker's ``gateway_config_info`` series (by pid) moves to the new hash. A worker's series
    shows once it takes SIGHUP, so "both up" means both would reload. The audit list is in Redis,
    shared by both."""
    async with await fake.start("openai", models=["m"], api_key="upstream-key") as upstream:
        cfg = tmp_path / "gw.yaml"
        # the default 50 ms per Redis call is a margin a busy machine overruns (a 503 for the audit
        # read, a reload's entry dropped): this test is about reloads, not Redis's failure policy
        redis = "redis: {url: 'redis://127.0.0.1:6379/11', timeout_ms: 10000}\n"
        cfg.write_text(config(upstream.url, extra=redis))
        gw = await served(cfg, "--workers", "2")
        url, proc = gw.url, gw.proc
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:

            async def workers_on(digest: str | None) -> bool:
                """Both workers' series show, on ``digest`` (any, when None)."""
                assert proc.poll() is None
                info = await config_info(session, url)
                on = {pid: h for (h, pid, _), v in info.items() if v == 1 and digest in (None, h)}
                return len(on) == 2

            await eventually(lambda: workers_on(None), "both workers up")
            cfg.write_text(config(upstream.url, new_model=True, extra=redis))
            async with session.post(url + "/admin/reload", headers=ADMIN_HEADERS) as r:
                assert r.status == 200, await r.text()
                new = (await r.json())["hash"]
            await eventually(lambda: workers_on(new), "both workers on the new config")
            # only the config in force: no series left behind per past version and worker
            assert {(h, v) for (h, _, _), v in (await config_info(session, url)).items()} == {(new, 1)}
            for _ in range(8):  # new connections, spread over both workers by the kernel
                assert await ask(session, url, LOAD_KEY, "m2") == 200

            async def audited() -> list[str] | None:
                """Who reloaded to ``new``, once both reloads are in the list."""
                async with session.get(url + "/admin/audit?limit=1000", headers=ADMIN_HEADERS) as r:
                    mine = sorted(e["admin"] for e in (await r.json())["entries"] if e.get("hash") == new)
                return mine if len(mine) >= 2 else None

            # the admin call's reload, then one from the forwarded SIGHUP in the other worker, which
            # writes its entry after its swap (what the series show): waited for, not assumed
            mine = await eventually(audited, "the other worker's reload in the audit list")
            assert mine == sorted([hash_key(ADMIN)[:8], "sighup"])


async def test_prices_reload_and_the_currency_waits_for_a_restart(served: Any, tmp_path: Path) -> None:
    """A reloaded price applies to the requests admitted after it; a changed currency would split the
    sums already counted, so it is kept and listed under ``restart_needed``."""

    def priced(prompt_price: int, completion_price: int, currency: str) -> str:
        price = f"{{model: m, input: {prompt_price}, output: {completion_price}}}"
        spend = f"spend:\n  currency: {currency}\n  prices: [{price}]\n"
        return config(upstream.url, extra=spend)

    async def cost(session: aiohttp.ClientSession, prompt_price: int, completion_price: int) -> int:
        """One request's cost at these prices per million tokens: millionths of the currency per token."""
        body = {"model": "m", "prompt": "hello there", "max_tokens": 4}
        headers = {"Authorization": f"Bearer {LOAD_KEY}"}
        async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
            assert r.status == 200
            usage = (await r.json())["usage"]
        return int(usage["prompt_tokens"] * prompt_price + usage["completion_tokens"] * completion_price)

    async def report(session: aiohttp.ClientSession) -> dict[str, Any]:
        async with session.get(url + "/admin/spend?group_by=model&period=day", headers=ADMIN_HEADERS) as r:
            assert r.status == 200
            return dict(await r.json())

    async with await fake.start("openai", models=["m"], api_key="upstream-key") as upstream:
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(priced(1, 2, "EUR"))
        gw = await served(cfg)
        url = gw.url
        async with aiohttp.ClientSession() as session:
            first = await cost(session, 1, 2)

            async def counted(total: int) -> bool:
                return (await report(session))["total_micros"] == total

            await eventually(lambda: counted(first), "the first request's cost in the report")
            put(cfg, priced(10, 30, "USD"))
            async with session.post(url + "/admin/reload", headers=ADMIN_HEADERS) as r:
                outcome = await r.json()
            assert outcome["result"] == "applied" and outcome["restart_needed"] == ["spend.currency"], outcome
            second = await cost(session, 10, 30)
            await eventually(lambda: counted(first + second), "the second request's cost, at the new prices")
            assert (await report(session))["currency"] == "EUR"
        await gw.stop()
