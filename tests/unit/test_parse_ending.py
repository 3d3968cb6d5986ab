"""Every dialect's parse ends in ``common.request_of``, which carries the features the parse found and
the client's name for each: a parse that built its ``InternalRequest`` by hand could drop them, and its
refusals would then name no field. The exceptions are the plain fast paths, which have no features to
carry (``openai/parse.py``: ``plain_completion``, ``plain_chat``; ``anthropic/parse.py``: ``typed_plain``,
a body of ``PLAIN_FIELDS`` alone)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    ("gateway/dialects/common.py", "request_of"),
    ("gateway/dialects/openai/parse.py", "plain_completion"),
    ("gateway/dialects/openai/parse.py", "plain_chat"),
    ("gateway/dialects/anthropic/parse.py", "typed_plain"),
}


def builders(name: str, source: str) -> set[tuple[str, str]]:
    """(file, function) of every ``InternalRequest(...)`` call in the file's source."""
    found: set[tuple[str, str]] = set()
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "InternalRequest":
                    found.add((name, fn.name))
    return found


def test_dialect_parses_end_in_one_helper() -> None:
    files = (ROOT / "gateway" / "dialects").rglob("*.py")
    found = set().union(*(builders(str(p.relative_to(ROOT)), p.read_text()) for p in files))
    assert found <= ALLOWED, sorted(found - ALLOWED)
    assert ("gateway/dialects/common.py", "request_of") in found


def test_a_hand_built_request_is_found() -> None:
    source = "def parse(b):\n    return InternalRequest(operation=1, model=b)\n"
    assert builders("gateway/dialects/x/parse.py", source) == {("gateway/dialects/x/parse.py", "parse")}
