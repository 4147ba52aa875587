"""The import graph of packages/*/src, read from the source (nothing is imported).

Every import counts: at module level, inside functions (a deferred import), and under
``if TYPE_CHECKING:``. Two rules:

* no cycle among the modules of one package (docs/architecture.md: what a lower module needs
  of a higher one is a ``Protocol`` it declares);
* services never import each other: nsqd, nsqlookupd, nsqadmin and nsq_authd share only
  nsq_common, nsq_serving and nsq_client, as Go's daemons share only ``internal/``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"nsqd", "nsqlookupd", "nsqadmin", "nsq_authd"}
SHARED = {"nsq_common", "nsq_serving", "nsq_client"}
# Cycles known and not yet broken, each as the sorted modules of one strongly connected
# component. To be emptied.
KNOWN_CYCLES: list[list[str]] = []


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found = {}
    for src in sorted(ROOT.glob("packages/*/src")):
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


def _imported(tree: ast.AST, package: str) -> Iterator[str]:
    """Every dotted name an import in ``tree`` may load, relative ones made absolute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], node.module or ""])
            else:
                base = node.module or ""
            # a submodule of base, else a name in base: the graph takes the deepest module
            yield from (f"{base.rstrip('.')}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of packages/*/src it imports (the deepest module a name is in)."""
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        targets = {owner(n) for n in _imported(ast.parse(path.read_text()), package)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle_within_a_package() -> None:
    found = cycles(import_graph())
    assert [c for c in found if c not in KNOWN_CYCLES] == []
    assert [c for c in KNOWN_CYCLES if c not in found] == [], "broken since: drop it from the list"


def test_services_share_only_the_libraries() -> None:
    crossing = sorted(f"{source} -> {target}"
                      for source, targets in import_graph().items()
                      if source.split(".")[0] in SERVICES
                      for target in targets
                      if target.split(".")[0] not in SHARED | {source.split(".")[0]})
    assert crossing == []


def test_the_checks_see_a_cycle_and_a_crossing() -> None:
    graph = import_graph()
    assert "nsqd.broker" in graph["nsqd.app"]  # the graph is read at all
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}) == [
        ["p.a", "p.b", "p.c"]]
