"""What the log says of a running gateway, read from ``llm-gateway serve --workers 2``'s own output:
each worker says at start that tracing is on and where its spans go, and every line (start-up, log
calls, request lines) carries the pid of the worker that wrote it."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.support.gateways import Gateways
from tests.support.redis_servers import free_port
from tests.support.waiting import eventually

CONFIG = """
auth: none
models: [{name: m, targets: [{provider: mock}]}]
redis: {url: 'redis://127.0.0.1:6379/12'}
tracing: {endpoint: '%s', sampling_ratio: 0.25, service_name: gw-test}
"""


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_each_worker_says_where_spans_go_and_signs_its_lines(gateways: Gateways, tmp_path: Path) -> None:
    collector = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens: export fails quietly
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG % collector)
    gw = await gateways.start("--config", str(cfg), "--workers", "2", "--log-format", "json")

    def tracing_lines() -> list[dict[str, object]]:
        return [line for line in gw.log_lines() if str(line.get("msg", "")).startswith("tracing on:")]

    await eventually(lambda: len(tracing_lines()) == 2, "both workers' tracing lines")
    expected = f"tracing on: spans to {collector} (OTLP/HTTP), service gw-test, 25% of the traces begun here sampled"
    assert {line["msg"] for line in tracing_lines()} == {expected}
    workers = {line["pid"] for line in tracing_lines()}
    assert len(workers) == 2 and {parent_of(int(str(p))) for p in workers} == {gw.pid}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        for _ in range(6):  # new connections, spread over both workers by the kernel
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            async with session.post(gw.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200

    def requests() -> list[dict[str, object]]:
        return [line for line in gw.log_lines() if line.get("event") == "request"]

    await eventually(lambda: len(requests()) >= 6, "the request lines")
    await gw.stop()
    lines = gw.log_lines()
    assert lines and all("pid" in line for line in lines), [line for line in lines if "pid" not in line][:3]
    assert {line["pid"] for line in requests()} <= workers
    start = [line for line in lines if line.get("event") == "start"]
    assert [line["pid"] for line in start] == [gw.pid]  # the parent's own line, before it forks
