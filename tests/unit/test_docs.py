"""The docs stay usable: the README stays short enough to read in ten minutes, every relative link in
the README, CONTRIBUTING, CHANGELOG and docs/ points at a file of the repository (and an anchor at a
heading of that file), and the metrics the docs name are ones the gateway exports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_deploy import exported

ROOT = Path(__file__).resolve().parents[2]
README_MAX_WORDS = 2500
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where a bracket is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return INLINE_LINK.findall(body) + REFERENCE_LINK.findall(body)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation gone, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        name, n = base, 0
        while name in found:  # GitHub numbers repeated headings: name, name-1, name-2
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def test_readme_is_short() -> None:
    words = len((ROOT / "README.md").read_text().split())
    assert words <= README_MAX_WORDS, f"README.md has {words} words; move detail to docs/"


def test_the_docs_are_all_checked() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/architecture.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path) -> None:
    broken: list[str] = []
    for target in links(doc.read_text()):
        if target.startswith(EXTERNAL):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_link_checker_catches_what_it_should(tmp_path: Path) -> None:
    text = (
        "[a](missing.md) [b](#nowhere) `[c](in-code.md)` ![d](img.png)\n"
        "```\n[e](in-fence.md)\n```\n[f]: ref.md\n# A `code` heading: twice!\n# A code heading twice\n"
    )
    assert links(text) == ["missing.md", "#nowhere", "img.png", "ref.md"]
    doc = tmp_path / "x.md"
    doc.write_text(text)
    assert anchors(doc) == {"a-code-heading-twice", "a-code-heading-twice-1"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_named_metrics_exist(doc: Path) -> None:
    named = set(re.findall(r"\b(gateway_[a-z_]+[a-z])\b", doc.read_text()))
    assert named <= exported(), named - exported()


def test_the_readme_names_every_cli_command_and_admin_path() -> None:
    """Its layout line names each ``llm-gateway`` command and its paths table each admin path the app
    serves (a path's own ``{id}`` under a listed one counts: ``/admin/keys/{key_id}`` under ``/admin/keys``).
    Both once fell behind the code (``spend``, ``/admin/spend``: issue 39)."""
    import argparse

    from gateway.cli import parser
    from gateway.runtime.config import parse_config
    from gateway.web.app import create_app

    readme = (ROOT / "README.md").read_text()
    (commands,) = re.findall(r"^\s+cli\.py\s+llm-gateway (.+)$", readme, re.M)
    (sub,) = (a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.split(" | ")) == set(sub.choices)
    app = create_app(parse_config({"models": [{"name": "m", "targets": [{"provider": "mock"}]}], "auth": "none"}))
    admin = {r.canonical for r in app.router.resources() if r.canonical.startswith("/admin/")}
    named = set(re.findall(r"`(/admin/[^`]*)`", readme))
    assert admin and {p for p in admin if p not in named and p.rpartition("/")[0] not in named} == set()
