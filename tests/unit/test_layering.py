"""Imports run one way: the core imports nothing of ours and no web framework; wire codecs depend
only on the core (and each other); only the composition root and the IO shells touch aiohttp."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules("gateway/core"), ids=lambda p: p.name)
def test_core_imports_only_core(path: Path) -> None:
    for name in imports(path):
        top = name.split(".")[0]
        assert top not in {"aiohttp", "redis", "adapters", "backends", "pydantic"}, name
        if top == "gateway":
            assert name.startswith("gateway.core"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", modules("gateway/dialects"), ids=lambda p: str(p.relative_to(ROOT)))
def test_codecs_are_sans_io(path: Path) -> None:
    for name in imports(path):
        top = name.split(".")[0]
        assert top not in {"aiohttp", "redis", "httpx", "asyncio", "adapters", "backends"}, name
        if top == "gateway":
            assert name.startswith(("gateway.core", "gateway.dialects")), f"{path.name} imports {name}"


def test_only_the_root_knows_the_adapters() -> None:
    users = {
        str(p.relative_to(ROOT)) for p in modules("gateway") if any(n.split(".")[0] == "adapters" for n in imports(p))
    }
    assert users <= {"gateway/web/app.py", "gateway/cli.py"}, users
