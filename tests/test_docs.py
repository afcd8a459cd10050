"""The docs follow the tree: every product module is in the code map of
docs/ARCHITECTURE.md and every path named there exists, the README stays a
front page, and relative links in README.md and docs/*.md resolve.

When this fails after you moved, added or removed a module: update the
``## Code map`` section of docs/ARCHITECTURE.md (one line per module)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("addon", "sidecar", "common", "chainproxy", "simnode")
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
README_MAX_LINES = 220

# `addon/upstream/forward.py`, `sidecar/probes/node.py`: a repo-relative .py path in backticks
_PATH = re.compile(r"`((?:" + "|".join(PRODUCT) + r")/[\w/]+\.py)`")
# [text](target) and ![alt](target); the target ends at whitespace or ")"
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")


def product_modules() -> set[str]:
    out = set()
    for pkg in PRODUCT:
        for path in (REPO / pkg).rglob("*.py"):
            if path.name in ("__init__.py", "__main__.py"):
                continue
            out.add(path.relative_to(REPO).as_posix())
    return out


def code_map() -> str:
    """The text of the ``## Code map`` section, up to the next ``## `` heading."""
    text = ARCHITECTURE.read_text()
    match = re.search(r"^## Code map[ \t]*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/ARCHITECTURE.md has no '## Code map' section"
    return match.group(1)


def test_every_product_module_is_in_the_code_map() -> None:
    named = set(_PATH.findall(code_map()))
    missing = sorted(product_modules() - named)
    assert not missing, (
        "modules not in the '## Code map' of docs/ARCHITECTURE.md "
        f"(add a line each, as `path/to/module.py` — what it holds): {missing}"
    )


def test_every_path_in_the_code_map_exists() -> None:
    gone = sorted(p for p in set(_PATH.findall(code_map())) if not (REPO / p).is_file())
    assert not gone, (
        f"the '## Code map' of docs/ARCHITECTURE.md names files that do not exist: {gone}"
    )


def test_readme_is_a_front_page() -> None:
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail into docs/"
    )


def links(text: str) -> list[str]:
    """Link targets outside fenced code blocks and inline code."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.extend(_LINK.findall(re.sub(r"`[^`]*`", "", line)))
    return out


def test_relative_links_resolve() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for doc in docs:
        for target in links(doc.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a URL (http:, mailto:) or an anchor in the same file
            path = unquote(target.split("#", 1)[0])
            if not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert not broken, f"relative links to files that do not exist: {broken}"
