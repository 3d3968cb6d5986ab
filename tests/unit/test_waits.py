"""Tests wait on the event meant, not on a clock: at most ``MAX_SLEEPS`` sleeps in the test tree (each
a deliberate hang cut by a bound, a model's pace in the fake, or a test of time itself), and one
polling helper, ``tests.support.waiting.eventually`` (with its blocking twin)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAX_SLEEPS = 10


def sleeps(source: str) -> int:
    """Calls of ``sleep`` (``asyncio.sleep``, ``time.sleep``, a bare imported ``sleep``) in ``source``."""
    return sum(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "sleep")
            or (isinstance(node.func, ast.Name) and node.func.id == "sleep")
        )
        for node in ast.walk(ast.parse(source))
    )


def defined(source: str) -> list[tuple[str, int]]:
    """(name, sleeps inside) of every function defined in ``source``."""
    nodes = ast.walk(ast.parse(source))
    return [
        (node.name, sleeps(ast.unparse(node)))
        for node in nodes
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_the_tests_sleep_at_most_ten_times() -> None:
    files = sorted(TESTS.rglob("*.py"))
    counted = {str(p.relative_to(TESTS)): n for p in files if (n := sleeps(p.read_text()))}
    assert sum(counted.values()) <= MAX_SLEEPS, counted


def test_one_eventually_and_no_other_poller() -> None:
    """``eventually`` is defined once; the old helpers' names (``until``, ``wait_until``, ...) only
    forward to it, sleeping nowhere."""
    found = [(str(p.relative_to(TESTS)), d) for p in sorted(TESTS.rglob("*.py")) for d in defined(p.read_text())]
    assert [path for path, (name, _) in found if name == "eventually"] == ["support/waiting.py"]
    assert [(path, name) for path, (name, n) in found if n and ("until" in name or "poll" in name)] == []


def test_a_sleep_is_found() -> None:
    source = "import asyncio\nasync def until(c):\n    while not c():\n        await asyncio.sleep(0.01)\n"
    assert sleeps(source) == 1
    assert defined(source) == [("until", 1)]
