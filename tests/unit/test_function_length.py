"""Functions short enough to read on one screen: none on the request path over ``MAX_LINES`` lines
(docstring included), so that a walk of the spine reads step by step. The command line's start-up
(``gateway/cli.py``, ``gateway/cli_admin.py``) runs before any request and is not held to it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60
PACKAGES = ("gateway", "adapters", "backends")
START_UP = frozenset({"gateway/cli.py", "gateway/cli_admin.py"})


def long_functions(name: str, source: str) -> list[str]:
    """``file:function (lines)`` of every function in ``source`` longer than ``MAX_LINES``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{name}:{node.name} ({lines})")
    return found


def test_no_function_on_the_request_path_is_over_sixty_lines() -> None:
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    names = [str(p.relative_to(ROOT)) for p in files]
    assert "gateway/web/pipeline.py" in names
    found = [
        f
        for p, name in zip(files, names, strict=True)
        if name not in START_UP
        for f in long_functions(name, p.read_text())
    ]
    assert found == []


def test_a_long_function_is_found() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    assert long_functions("x.py", f"async def handle():\n{body}") == [f"x.py:handle ({MAX_LINES + 1})"]
    assert long_functions("x.py", f"def short():\n{body[: -len(body.splitlines()[-1]) - 1]}") == []


def test_the_spine_has_no_closures() -> None:
    """The pipeline's steps are named module-level functions (and ``RouteHandler``'s method), so a walk
    of the code can start at any of them: no step hides inside another."""
    tree = ast.parse((ROOT / "gateway" / "web" / "pipeline.py").read_text())
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    outer = [node for node in ast.walk(tree) if isinstance(node, defs)]
    nested = [inner.name for node in outer for inner in ast.walk(node) if inner is not node and isinstance(inner, defs)]
    assert nested == []
