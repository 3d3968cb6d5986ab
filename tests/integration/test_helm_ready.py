"""The Helm chart as ``docs/deployment.md`` installs it, without a cluster: the documented ``helm
install`` command rendered by real Helm, then what the pods would run, run here as local processes:
the release's Redis with the StatefulSet's own arguments, and the gateway with the image's ENTRYPOINT,
the Deployment's args, the rendered ConfigMap as its config file and the container's env resolved from
the rendered Secrets. The gateway's pod is Ready when ``/ready`` answers 200; then the admin key that
NOTES.txt tells you to read issues a team key, and the key gets an answer.

What differs from a pod, and only that: the ports (free ones here, 8080 and 6379 there), the
config file's and Redis's directories, and Redis's address in the config (the Service's name there)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.integration.test_cli import end
from tests.redis_servers import REDIS_SERVER, free_port, wait_port
from tests.support import eventually
from tests.unit.helm_chart import DEPLOY, HELM, by_kind, container

ROOT = DEPLOY.parent
BIN = Path(HELM).parent  # the venv's: helm and llm-gateway


def documented_install() -> list[str]:
    """The ``helm install`` command of docs/deployment.md, word for word, as ``helm template``."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    (command,) = re.findall(r"^helm install .*$", text, re.M)
    words = shlex.split(command)
    assert words[:2] == ["helm", "install"] and "--set" in words and any("image.repository=" in w for w in words)
    return [HELM, "template", *words[2:]]


def render_documented() -> dict[str, dict[str, Any]]:
    out = subprocess.run(documented_install(), capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    return by_kind([d for d in yaml.safe_load_all(out.stdout) if d])


def container_env(manifests: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The gateway container's env, each ``secretKeyRef`` read from the Secrets the release renders."""
    secrets = {m["metadata"]["name"]: m["stringData"] for m in manifests.values() if m["kind"] == "Secret"}
    env = {}
    for var in container(manifests)["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] in secrets, f"{var['name']}: the Secret {ref['name']} is not in the release"
        env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def image_command(manifests: dict[str, dict[str, Any]], config: Path, port: int) -> list[str]:
    """The Dockerfile's exec-form ENTRYPOINT and the container's args, with a local port and config path."""
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert entrypoint, "deploy/Dockerfile has an exec-form ENTRYPOINT"
    words: list[str] = [*json.loads(entrypoint[1]), *container(manifests)["args"]]
    assert words[0] == "llm-gateway"
    words[0] = str(BIN / "llm-gateway")
    words[words.index("--port") + 1] = str(port)
    mount = words[words.index("--config") + 1]
    assert Path(mount).name in manifests["ConfigMap"]["data"]
    words[words.index("--config") + 1] = str(config)
    return words


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gw-helm-") as d:
        yield Path(d)


def start_release_redis(manifests: dict[str, dict[str, Any]], data: Path) -> tuple[subprocess.Popen[bytes], int]:
    """redis-server with the StatefulSet's arguments (its persistence), on a free loopback port."""
    (redis,) = manifests["StatefulSet/redis"]["spec"]["template"]["spec"]["containers"]
    args = list(redis["args"])
    assert args[0] == "redis-server" and args[args.index("--appendonly") + 1] == "yes"
    args[args.index("--dir") + 1] = str(data)
    port = free_port()
    proc = subprocess.Popen(
        [REDIS_SERVER, *args[1:], "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return proc, port


def tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """Polls ``/ready`` as the kubelet's readiness probe does, until 200 or the process exits."""
    async with aiohttp.ClientSession() as session:

        async def ready() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise AssertionError(f"the gateway exited {proc.returncode}: {tail(log)}")
            try:
                async with session.get(url + "/ready") as resp:
                    return dict(await resp.json()) if resp.status == 200 else None
            except aiohttp.ClientError:
                return None

        return await eventually(ready, f"/ready answering 200 (the gateway's log: {log})")


async def test_the_documented_helm_install_becomes_ready_and_answers(workdir: Path) -> None:
    manifests = render_documented()
    config = yaml.safe_load(manifests["ConfigMap"]["data"]["gateway.yaml"])
    (workdir / "redis").mkdir()
    redis, redis_port = start_release_redis(manifests, workdir / "redis")
    service = manifests["Service/redis"]["metadata"]["name"]
    assert config["redis"]["url"] == f"redis://{service}:6379/0"
    config["redis"]["url"] = f"redis://127.0.0.1:{redis_port}/0"
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    env = container_env(manifests)
    log = workdir / "gateway.log"
    with log.open("wb") as out:
        gateway = subprocess.Popen(
            image_command(manifests, path, port),
            env={"PATH": os.environ["PATH"], "HOME": str(workdir), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        ready = await wait_ready(url, gateway, log)
        assert ready["models"]["demo"] is True
        admin = {"Authorization": f"Bearer {env['LLM_GATEWAY_ADMIN_KEY']}"}
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/admin/keys", json={"teams": ["default"]}, headers=admin) as resp:
                assert resp.status in (200, 201), await resp.text()
                key = (await resp.json())["key"]
            body = {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
            headers = {"Authorization": f"Bearer {key}"}
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
        assert answer["choices"][0]["message"]["content"]
    finally:
        end(gateway)
        end(redis)


def test_the_admin_key_is_generated_only_when_none_is_given() -> None:
    """NOTES.txt's instructions read a Secret that exists: the generated one, and only then."""
    manifests = render_documented()
    assert len(container_env(manifests)["LLM_GATEWAY_ADMIN_KEY"]) >= 32
    assert "Secret/admin" in manifests
    own = subprocess.run(
        [*documented_install(), "--set", "secrets.values.LLM_GATEWAY_ADMIN_KEY=mine"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "-admin" not in own.stdout and "mine" in own.stdout
