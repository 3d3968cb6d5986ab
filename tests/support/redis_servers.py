"""Real Redis servers for tests that stop, restart or cluster them: each on its own free loopback port,
with no persistence, in a temporary directory."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.support.waiting import eventually_blocking

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_port(below: int = 65536) -> int:
    """A free loopback port; cluster nodes also need ``port + 10000`` (their bus) to be valid and free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below and (below == 65536 or _free(port + 10000)):
            return port
    raise RuntimeError("no free port found")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_port(port: int, up: bool = True) -> None:
    """Until something listens on ``port`` (``up``), or nothing does."""
    eventually_blocking(lambda: listening(port) == up, f"port {port} {'listening' if up else 'closed'}")


class RedisServer:
    def __init__(self, port: int | None = None, *extra: str) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gw-redis-"))
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*args, "--dir", str(self.dir), *self.extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        wait_port(self.port, up=False)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three masters on loopback, slots spread by ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        self.nodes = [
            RedisServer(free_port(below=55536), "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
            for _ in range(3)
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.extra = (*node.extra, "--cluster-config-file", str(node.dir / "nodes.conf"))
            node.start()
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        eventually_blocking(self.ok, "the cluster's state ok")
        return self

    def ok(self) -> bool:
        info = [REDIS_CLI, "-p", str(self.nodes[0].port), "cluster", "info"]
        return "cluster_state:ok" in subprocess.run(info, capture_output=True, text=True).stdout

    def close(self) -> None:
        for node in self.nodes:
            node.close()
