"""Imports run one way. Each layer may import only the layers beneath it:

    core                       nothing of ours, no web framework, no Redis, no pydantic
    dialects                   core (sans-IO codecs: no aiohttp, redis, httpx or asyncio either)
    runtime                    core (config, timers, defaults: what adapters and backends may use)
    store                      core, runtime (the Redis client every user of shared state sees)
    obs                        core, runtime (metrics and logs)
    policy                     core, runtime, obs, store
    limits                     core, runtime, obs, store
    routing                    core, runtime, obs (feature fit lives here, not in policy)
    adapters                   core, dialects, runtime (metrics and the member upstreams come in
                               through their constructors)
    backends                   core, dialects, runtime, store (the replica pool in ``backends/pool``)
    web                        everything above (``web/app.py`` is the composition root)
    cli                        everything (it starts the app)
    cli_admin                  nothing of ours (an HTTP client of the admin API, used by cli)

A module that imports a layer its own may not fails here, naming the file and the import; so does
a circle of imports between modules, inside a layer too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("gateway", "adapters", "backends")

BENEATH: dict[str, frozenset[str]] = {
    "gateway.core": frozenset(),
    "gateway.dialects": frozenset({"gateway.core"}),
    "gateway.runtime": frozenset({"gateway.core"}),
    "gateway.store": frozenset({"gateway.core", "gateway.runtime"}),
    "gateway.obs": frozenset({"gateway.core", "gateway.runtime"}),
    "gateway.policy": frozenset({"gateway.core", "gateway.runtime", "gateway.obs", "gateway.store"}),
    "gateway.limits": frozenset({"gateway.core", "gateway.runtime", "gateway.obs", "gateway.store"}),
    "gateway.routing": frozenset({"gateway.core", "gateway.runtime", "gateway.obs"}),
    "adapters": frozenset({"gateway.core", "gateway.dialects", "gateway.runtime"}),
    "backends": frozenset({"gateway.core", "gateway.dialects", "gateway.runtime", "gateway.store"}),
}
BENEATH["gateway.web"] = frozenset().union(*BENEATH.values(), BENEATH) - {"gateway.web"}
BENEATH["gateway.cli_admin"] = frozenset()
BENEATH["gateway.cli"] = BENEATH["gateway.web"] | {"gateway.web", "gateway.cli_admin"}
BENEATH["gateway.__main__"] = frozenset({"gateway.cli"})
BENEATH["gateway"] = frozenset()  # the package's __init__: its version, nothing else

# Third-party packages a layer must not touch: the core and the codecs stay sans-IO.
FORBIDDEN: dict[str, frozenset[str]] = {
    "gateway.core": frozenset({"aiohttp", "redis", "httpx", "pydantic", "prometheus_client"}),
    "gateway.dialects": frozenset({"aiohttp", "redis", "httpx", "asyncio", "prometheus_client"}),
    "gateway.runtime": frozenset({"redis", "prometheus_client"}),
}
# The one module that may reach below libraries' APIs, whatever its layer (its docstring says why)
FENCE = "gateway.runtime.internals"


def layer(module: str) -> str:
    """``gateway.web.app`` → ``gateway.web``; ``adapters.http`` → ``adapters``; ``gateway`` → ``gateway``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gateway" and len(parts) > 1 else parts[0]


def imports(source: str) -> set[str]:
    """Every absolute import, function-level ones included; ``from gateway import x`` counts as
    ``gateway.x``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module in OURS:
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def violations(module: str, source: str) -> list[str]:
    own = layer(module)
    allowed = BENEATH.get(own)
    assert allowed is not None, f"{module}: its layer {own!r} is not in the table: add it"
    wrong: list[str] = []
    for name in sorted(imports(source)):
        top = name.split(".")[0]
        if top in FORBIDDEN.get(own, ()) and module != FENCE:
            wrong.append(f"{module} imports {name} ({own} stays free of {top})")
        if any(part.startswith("_") and part != "__future__" for part in name.split(".")) and module != FENCE:
            wrong.append(f"{module} imports {name}: a library's private module, only in {FENCE}")
        if top in OURS and name not in OURS:
            target = layer(name)
            if target != own and target not in allowed:
                wrong.append(f"{module} imports {name} ({own} may import only {', '.join(sorted(allowed))})")
    return wrong


def ours() -> list[Path]:
    return sorted(p for folder in OURS for p in (ROOT / folder).rglob("*.py"))


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", ours(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_one_way(path: Path) -> None:
    assert violations(module_of(path), path.read_text()) == []


def test_only_the_composition_root_builds_adapters() -> None:
    users = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "gateway").rglob("*.py")
        if any(n.split(".")[0] == "adapters" for n in imports(p.read_text()))
    }
    assert users <= {"gateway/web/app.py", "gateway/cli.py"}, users


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("gateway.core.request", "from gateway.web.state import GATEWAY"),
        ("gateway.core.errors", "import aiohttp"),
        ("gateway.dialects.openai.parse", "from gateway.limits.plan import Plan"),
        ("gateway.dialects.sse", "import asyncio"),
        ("adapters.http", "from gateway.obs.metrics import TARGET_UP"),
        ("backends.pool.replicas", "from adapters.http import HTTPUpstream"),
        ("gateway.runtime.timers", "from gateway import obs"),
        ("gateway.limits.store", "from gateway.routing.table import ModelTable"),
        ("gateway.obs.metrics", "def f():\n    from gateway.web import app\n"),
        ("gateway.routing.dispatch", "from gateway.policy.auth import KeyRing"),
        ("gateway.store.redis_client", "from gateway.limits import build_admission"),
        ("backends.pool.replicas", "from gateway.web.state import Gateway"),
        ("gateway.policy.auth", "from _sha2 import sha256"),
        ("gateway.limits.channel", "import redis._parsers"),
    ],
)
def test_a_wrong_import_is_caught(module: str, source: str) -> None:
    assert violations(module, source), f"{module}: {source!r} should be refused"


def test_every_layer_is_in_the_table() -> None:
    assert {layer(module_of(p)) for p in ours()} <= set(BENEATH)


# What the fence reaches for below libraries' APIs: an attribute of these names anywhere else is a use
# outside the fence (aiohttp's reader and answer internals, redis-py's connection below its commands).
BELOW_API = frozenset(
    {"_read_nowait", "_read_nowait_chunk", "_send_headers_immediately", "_http_chunk_splits"}
    | {"send_packed_command", "read_response", "get_connection", "connection_kwargs"}
)


@pytest.mark.parametrize("path", ours(), ids=lambda p: str(p.relative_to(ROOT)))
def test_library_internals_stay_in_the_fence(path: Path) -> None:
    if module_of(path) == FENCE:
        return
    used = {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
    assert not used & BELOW_API, f"{module_of(path)} uses {sorted(used & BELOW_API)}: only {FENCE} may"


def edges(module: str, source: str, known: set[str]) -> set[str]:
    """The modules of ours that ``module`` imports, anywhere in it (``TYPE_CHECKING`` blocks and
    function bodies included): ``from pkg import sub`` names the submodule ``pkg.sub`` where one exists."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            names = [s for s in subs if s in known] if any(s in known for s in subs) else [node.module]
        else:
            continue
        found.update(n for n in names if n in known and n != module)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circles() -> None:
    """Inside a layer too, imports run one way: two modules that import each other (even for types
    only) are one module in two files, or want a third that both import."""
    paths = {module_of(p): p for p in ours()}
    known = set(paths)
    graph = {m: edges(m, p.read_text(), known) for m, p in paths.items()}
    assert circles(graph) == []


def test_a_circle_is_caught() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    known = {"pkg", "pkg.sub", "pkg.other"}
    assert edges("pkg.other", "from pkg import sub\nif X:\n    from pkg.sub import y\n", known) == {"pkg.sub"}
    assert edges("pkg.other", "from pkg import thing\n", known) == {"pkg"}
