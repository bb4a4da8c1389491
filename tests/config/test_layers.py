"""The architecture, checked: imports only point down (README § Architecture).

Module-level imports only: an import inside a function is how the one allowed upward reference,
the on-commit enqueue of a job from memory.actions, stays out of import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# For each module (or package prefix): the engram modules it must not import at module level.
FORBIDDEN = {
    "tenants": ("audit", "memory"),
    "audit": ("memory",),
    "config": ("memory",),
    "memory.models": ("memory.actions", "memory.queries", "memory.api", "memory.extraction"),
    "memory.retrieval": ("memory.actions", "memory.queries", "memory.api", "memory.extraction"),
    "memory.queries": ("memory.actions", "memory.api", "memory.extraction"),
    "memory.actions": ("memory.queries", "memory.api", "memory.extraction"),
    "memory.extraction": ("memory.api", "memory.web"),
    # The dashboards are an entry point beside the API: they write through actions, read
    # through queries, and share nothing with the API's modules.
    "memory.web": ("memory.api", "memory.mcp", "memory.extraction"),
    "memory.api": ("memory.web",),
    # The graph store sits beside retrieval: models and tenants, and of retrieval only the
    # embedder (a leaf), for the entity names' vectors.
    "memory.graph": (
        "memory.actions",
        "memory.queries",
        "memory.api",
        "memory.extraction",
        "memory.retrieval.search",
        "memory.retrieval.scoring",
        "memory.retrieval.filters",
        "memory.text.temporal",
    ),
}
PACKAGES = ("tenants", "audit", "config", "memory")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in tree.body:  # module level only
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def rules_for(module: str) -> tuple[str, ...]:
    return tuple(
        banned
        for owner, bans in FORBIDDEN.items()
        if module == owner or module.startswith(owner + ".")
        for banned in bans
    )


def test_imports_only_point_down() -> None:
    violations = []
    checked = 0
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            module = module_name(path)
            checked += 1
            violations += [
                f"{module} imports {imported}"
                for imported in top_level_imports(path)
                for banned in rules_for(module)
                if imported == banned or imported.startswith(banned + ".")
            ]
    assert checked > 40  # the walk found the code
    assert violations == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from memory.api.common import tenant\n\ndef f():\n    import memory.queries\n")
    assert top_level_imports(bad) == {"memory.api.common", "memory.api.common.tenant"}
    assert rules_for("memory.retrieval.search") == (
        "memory.actions", "memory.queries", "memory.api", "memory.extraction",
    )  # fmt: skip


def test_retrieval_never_imports_the_graph() -> None:
    """Search's entity signal reads MemoryEntity itself; the recogniser it shares with the graph
    lives in memory.text, below both."""
    found = set()
    for path in (ROOT / "memory" / "retrieval").rglob("*.py"):
        found |= {
            i for i in top_level_imports(path) if i.startswith(("memory.graph", "memory.text"))
        }
    assert any(i.startswith("memory.text.recognise") for i in found), found
    assert not any(i.startswith("memory.graph") for i in found), found


def test_the_mcp_package_uses_only_api_helpers_and_nothing_imports_it() -> None:
    """memory.mcp sits beside memory.api: it may use actions, queries, retrieval and the API's
    serializers and shared helpers (not its views); only config.urls reaches it, by name. Its
    stdio script loads no Django: of engram it imports the env readers and the header names."""
    helpers = ("memory.api.common", "memory.api.serializers")
    violations = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = module_name(path)
            imports = top_level_imports(path)
            if module.startswith("memory.mcp"):
                violations += [
                    f"{module} imports {i}"
                    for i in imports
                    if i.startswith(("memory.extraction", "memory.api."))
                    and not i.startswith(helpers)
                ]
            else:
                violations += [
                    f"{module} imports {i}" for i in imports if i.startswith("memory.mcp")
                ]
    stdio = top_level_imports(ROOT / "memory" / "mcp" / "stdio.py")
    engram = {i.rsplit(".", 1)[0] for i in stdio if i.startswith(PACKAGES) and "." in i}
    assert engram <= {"config", "config.env", "memory.mcp", "memory.mcp.headers"}, engram
    assert violations == []
