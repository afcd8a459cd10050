"""The docs follow the tree: every product module is in the code map of
docs/ARCHITECTURE.md and every path named there exists, the README stays a
front page, relative links in README.md, CHANGELOG.md and docs/*.md resolve
(files and headings), every config key the parser accepts is in
docs/CONFIGURATION.md's table, and the repository stands alone: every
``docs/<file>.md#<heading>`` pointer in code or docs resolves, and nothing points at a
design file outside the repository.

When this fails after you moved, added or removed a module: update the
``## Code map`` section of docs/ARCHITECTURE.md (one line per module)."""

from __future__ import annotations

import re
import subprocess
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


def anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in doc.read_text().splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _broken(doc: Path, target: str) -> bool:
    """A relative link ``path#anchor`` from ``doc``: the file is missing, or it is
    Markdown without that heading."""
    path, _, anchor = target.partition("#")
    file = (doc.parent / unquote(path)) if path else doc
    if not file.exists():
        return True
    return bool(anchor) and file.suffix == ".md" and anchor not in anchors(file)


def test_relative_links_resolve() -> None:
    docs = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for doc in docs:
        for target in links(doc.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # a URL (http:, mailto:)
            if _broken(doc, target):
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert not broken, f"relative links to files or headings that do not exist: {broken}"


# --- every config key the parser accepts is in CONFIGURATION's "Every key" table ---

CONFIGURATION = REPO / "docs" / "CONFIGURATION.md"
_CELL_KEY = re.compile(r"`([^`]+)`")


def accepted_config_keys() -> set[str]:
    """Every key ``parse_config`` accepts, as a dotted path (``proxy.tiers[].name``,
    ``networks.<name>.genesis``): read from its own ``check_keys`` calls on a file
    that opens every section, so a key added to the parser is seen here."""
    import importlib
    import pkgutil

    import common.config as package
    from common.config import parse_config

    seen: set[str] = set()

    def record(section: object, allowed: tuple[str, ...], prefix: str) -> None:
        prefix = re.sub(r"\[\d+\]", "[]", prefix)
        prefix = re.sub(r"^networks\.[^.]+", "networks.<name>", prefix)
        seen.update(f"{prefix}.{k}" if prefix else k for k in allowed)

    modules = [
        importlib.import_module(f"{package.__name__}.{m.name}")
        for m in pkgutil.iter_modules(package.__path__)
    ]
    patched = [m for m in modules if hasattr(m, "check_keys")]
    saved = {m: m.check_keys for m in patched}
    sections = (
        "failover cache usage websocket coalesce head_pinning hedge upstream_limits "
        "prewarm cross_check"
    ).split()
    raw = {
        "proxy": {
            **{name: {} for name in sections},
            "rate_limit": {"costs": {}},
            "tiers": [{"name": "t", "cidrs": ["10.0.0.0/8"], "rate_limit": {"costs": {}}}],
        },
        "sidecar": {},
        "probe": {},
        "networks": {"finney": {}},
        "registry": {
            "endpoints": [
                {
                    "url": "https://a.example",
                    "provider": "p",
                    "kind": "node-rpc",
                    "network": "finney",
                }
            ]
        },
        "redis": {"url": "redis://127.0.0.1:6379/0"},
    }
    try:
        for m in patched:
            m.check_keys = record
        parse_config(raw, env={})
    finally:
        for m, fn in saved.items():
            m.check_keys = fn
    # a tier's rate_limit takes the keys of proxy.rate_limit (its row says so)
    seen = {k.replace("proxy.tiers[].rate_limit.", "proxy.rate_limit.") for k in seen}
    sections_only = {k for k in seen if any(o.startswith((k + ".", k + "[].")) for o in seen)}
    return seen - sections_only


def documented_config_keys() -> tuple[set[str], set[str]]:
    """The keys the ``## Every key`` table names: (every key covered, the keys in
    its key column). A key cell "`a.b` / `.c`" names ``a.b`` and ``a.c``; a row for
    a group (``probe.*``, ``networks.<name>``, ``registry.endpoints[]``) covers the
    names in backticks in its meaning."""
    text = CONFIGURATION.read_text()
    match = re.search(r"^## Every key[ \t]*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/CONFIGURATION.md has no '## Every key' section"
    covered: set[str] = set()
    named: set[str] = set()
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] in ("key", "---"):
            continue
        full = ""
        for token in _CELL_KEY.findall(cells[0]):
            if token.startswith(".") and full:
                key = full.rsplit(".", 1)[0] + token
            else:
                key = full = token
            named.add(key)
            covered.add(key)
            group = key.removesuffix(".*")
            if key.endswith((".*", "[]", ">")):
                meaning = " ".join(cells[2:])
                covered.update(
                    f"{group}.{w}" for w in _CELL_KEY.findall(meaning) if re.fullmatch(r"\w+", w)
                )
    return covered, named


def test_every_config_key_is_documented() -> None:
    covered, _ = documented_config_keys()
    missing = sorted(k for k in accepted_config_keys() if k not in covered)
    assert not missing, (
        "config keys the parser accepts but the '## Every key' table of "
        f"docs/CONFIGURATION.md does not name (add a row: key, default, meaning): {missing}"
    )


def test_every_documented_config_key_exists() -> None:
    accepted = accepted_config_keys()
    prefixes = {p for k in accepted for p in _prefixes(k)}
    _, named = documented_config_keys()
    gone = sorted(
        k
        for k in named
        if not k.endswith((".*", ">"))
        and k not in accepted | prefixes
        and k.replace("[]", "") not in prefixes
    )
    assert not gone, f"the '## Every key' table of docs/CONFIGURATION.md names unknown keys: {gone}"


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


# --- the repository stands alone ---

# The design page these docs grew from lived outside the repository: a clone
# cannot follow a reference to it. Every contract is in docs/ (DESIGN-NOTES.md,
# "The contract, and where it is written").
_OUTSIDE = re.compile(r"\bDESIGN(?:\.md\b| ?§| section \d)|\.\./shared\b")
_SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}


def repo_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        files = [REPO / f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [
            p
            for p in REPO.rglob("*")
            if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(REPO).parts)
        ]
    return [f for f in files if f.is_file()]


# `docs/OPERATIONS.md#scaling-out` in a comment, a docstring or a doc: repo-relative
_DOC_REF = re.compile(r"(?<![\w.])((?:docs/[\w-]+|deploy/README|CHANGELOG|README)\.md)(#[\w-]+)?")


def test_references_to_the_docs_resolve() -> None:
    """Code and docs point readers at e.g. ``docs/OPERATIONS.md#scaling-out``: the
    file and the heading exist, so a clone can follow every such pointer."""
    broken = []
    for path in repo_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for name, anchor in set(_DOC_REF.findall(text)):
            if _broken(REPO / "README.md", name + anchor):  # relative to the root
                broken.append(f"{path.relative_to(REPO)}: {name}{anchor}")
    assert not broken, f"references to docs files or headings that do not exist: {sorted(broken)}"


def test_no_reference_to_a_file_outside_the_repository() -> None:
    found = []
    for path in repo_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (pictures, recorded traffic)
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not found, (
        "references to a design file outside the repository (a clone cannot follow "
        f"them): point them at the docs/ file that holds the contract: {found}"
    )
