"""The /status page as a person sees it: rendered by headless Chromium (Debian's package), screenshot
checked for the expected content, and the page's text checked for each section."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gateway.runtime.config import hash_key, parse_config
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, target
from tests.integration.dialect_clients import BY_NAME, KEY

ADMIN = "status-admin-key"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


async def test_status_page(gateway: GatewayFactory, upstream: Any, tmp_path: Path) -> None:
    server = await upstream("openai")
    cfg = parse_config(
        {
            "models": [{"name": "m", "targets": [target(server, "openai")]}],
            "teams": [{"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}]}],
            "admin": {"key_sha256": hash_key(ADMIN)},
        }
    )
    gw = await gateway(cfg)
    for _ in range(3):
        assert (await gw.send(BY_NAME["openai"], "m", "x", False)).status == 200
    gw.server.app[GATEWAY].backlog.drain()  # the requests' records, done in batches, are in
    async with gw.session.get(gw.url + "/status") as resp:
        assert resp.status == 401 and "Basic" in resp.headers["WWW-Authenticate"]
    async with gw.session.get(gw.url + "/status", headers={"Authorization": f"Bearer {KEY}"}) as resp:
        assert resp.status == 401  # a team key is not an admin key
    basic = base64.b64encode(f"admin:{ADMIN}".encode()).decode()
    async with gw.session.get(gw.url + "/status", headers={"Authorization": f"Basic {basic}"}) as resp:
        page = await resp.text()
    assert resp.status == 200 and 'http-equiv="refresh"' in page and "<script" not in page
    assert "team1" in page and "openai:up-model" in page and ">up<" in page
    assert CHROMIUM is not None, "Debian's chromium is required (scripts/test installs it)"
    shot = tmp_path / "status.png"
    url = gw.url.replace("http://", f"http://admin:{ADMIN}@") + "/status"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    args += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    args += [f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1000,700", url]
    proc = await asyncio.create_subprocess_exec(*args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.wait_for(proc.wait(), 60)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, "the screenshot should show a rendered page"
    text_proc = await asyncio.create_subprocess_exec(
        *[a for a in args if not a.startswith("--screenshot")][:-1],
        "--dump-dom",
        url,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    dom, _ = await asyncio.wait_for(text_proc.communicate(), 60)
    assert b"Usage per team" in dom and b"Backend health" in dom and b"team1" in dom
