"""The architecture, checked: imports only point down, and no module imports itself back.

Every import counts, those inside functions too: an import inside a function runs later, but it
is the same dependency. The layers, top to bottom (docs/architecture.md):

    entry points   memory.api, memory.mcp, memory.web, memory.health, memory.exposition
                   (the metrics scrape), admin, management
                   commands, and the worker's memory.extraction (it reads through queries,
                   writes through actions)
    use cases      memory.search (reads that rank), memory.queries (reads), memory.actions (writes)
    domain         memory.graph, memory.retrieval
    jobs           memory.jobs (a job sent by name: actions need no worker code)
    models         memory.models
    text analysis  memory.text (embeddings, the entity recogniser, time windows, a query)
    platform       tenants, audit, config

The webhooks app sits beside the use cases: it reads memory's models and sends its jobs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tenants", "audit", "config", "memory", "webhooks")
ENTRY_POINTS = ("memory.api", "memory.mcp", "memory.web", "memory.health", "memory.exposition")
USE_CASES = ("memory.search", "memory.context", "memory.queries", "memory.actions")
DOMAIN = ("memory.extraction", "memory.graph", "memory.retrieval")
LOW = ("memory.jobs", "memory.models")
TEXT = ("memory.text",)

# For each module (or package prefix): the engram modules it must not import, anywhere in it.
FORBIDDEN = {
    "tenants": ("audit", "memory"),
    "audit": ("memory",),
    "config": ("memory",),
    "memory.text": (*ENTRY_POINTS, *USE_CASES, *DOMAIN, *LOW),
    "memory.models": (*ENTRY_POINTS, *USE_CASES, *DOMAIN, "memory.jobs"),
    "memory.jobs": (*ENTRY_POINTS, *USE_CASES, *DOMAIN, "memory.models", *TEXT),
    # Retrieval and the graph sit side by side: search reads MemoryEntity and EntityVector
    # itself; both use the text-analysis layer below them.
    "memory.retrieval": (*ENTRY_POINTS, *USE_CASES, "memory.extraction", "memory.graph"),
    "memory.graph": (*ENTRY_POINTS, *USE_CASES, "memory.extraction", "memory.retrieval"),
    "memory.actions": (*ENTRY_POINTS, "memory.search", "memory.queries", "memory.extraction"),
    "memory.queries": (*ENTRY_POINTS, "memory.search", "memory.actions", "memory.extraction"),
    "memory.search": (*ENTRY_POINTS, "memory.actions", "memory.extraction", "memory.context"),
    # The context block composes a search with the profile, the summary and the graph.
    "memory.context": (*ENTRY_POINTS, "memory.actions", "memory.extraction"),
    # Extraction runs in the worker: it reads through queries and writes through actions.
    "memory.extraction": (*ENTRY_POINTS, "memory.search"),
    # The dashboards are an entry point beside the API: they share nothing with its modules.
    "memory.web": ("memory.api", "memory.mcp", "memory.extraction"),
    "memory.api": ("memory.web", "memory.mcp"),
    # Webhooks report memory changes: they read memory's models and send its jobs, beside the
    # use cases (the erasure action reports through webhooks.outbox).
    "webhooks": (*ENTRY_POINTS, *USE_CASES, "memory.extraction", "memory.graph"),
}
# Process hooks at the very top: gunicorn's loads the embedder before the first request; the
# worker's metrics listener is a process of its own, forked by Dramatiq, that serves the scrape.
EXEMPT = ("config.gunicorn_conf", "config.metrics_server")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[module_name(path)] = path
    return found


def imports(path: Path) -> set[str]:
    """Every module the file imports, at any depth: `from a.b import c` is a.b and a.b.c (one
    of them is a module; the other, a name in it, matches no module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def rules_for(module: str) -> tuple[str, ...]:
    if module in EXEMPT:
        return ()
    return tuple(
        banned
        for owner, bans in FORBIDDEN.items()
        if module == owner or module.startswith(owner + ".")
        for banned in bans
    )


def graph_of(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the engram modules it imports (names that are modules of the tree)."""
    return {
        module: {i for i in imports(path) if i in found and i != module}
        for module, path in found.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def test_imports_only_point_down() -> None:
    found = modules()
    assert len(found) > 80  # the walk found the code
    violations = [
        f"{module} imports {imported}"
        for module, path in found.items()
        for imported in imports(path)
        for banned in rules_for(module)
        if imported == banned or imported.startswith(banned + ".")
    ]
    assert violations == []


def test_no_import_cycles() -> None:
    assert cycles(graph_of(modules())) == []


def test_the_checker_sees_a_violation_and_a_cycle(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from memory.api.common import tenant\n\ndef f():\n    import memory.queries\n")
    assert imports(bad) == {"memory.api.common", "memory.api.common.tenant", "memory.queries"}
    assert "memory.queries" in rules_for("memory.actions.memories")
    assert rules_for("config.gunicorn_conf") == ()
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_mcp_package_uses_only_api_helpers_and_nothing_imports_it() -> None:
    """memory.mcp sits beside memory.api: it may use actions, queries, search and the API's
    serializers and shared helpers (not its views); only config.urls reaches it, by name. Its
    stdio script loads no Django: of engram it imports the env readers and the header names."""
    helpers = ("memory.api.common", "memory.api.serializers")
    violations = []
    for module, path in modules().items():
        found = imports(path)
        if module.startswith("memory.mcp"):
            violations += [
                f"{module} imports {i}"
                for i in found
                if i.startswith(("memory.extraction", "memory.api.")) and not i.startswith(helpers)
            ]
        else:
            violations += [f"{module} imports {i}" for i in found if i.startswith("memory.mcp")]
    stdio = imports(ROOT / "memory" / "mcp" / "stdio.py")
    engram = {i.rsplit(".", 1)[0] for i in stdio if i.startswith(PACKAGES) and "." in i}
    assert engram <= {"config", "config.env", "memory.mcp", "memory.mcp.headers"}, engram
    assert violations == []
