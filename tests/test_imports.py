"""The package's import graph, read from the source (every import, those inside functions too):
no module imports itself back through others, and placing turns (the forest, its deciders)
imports neither the fitting nor the evaluation that sit above it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "chunktree"


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from a.b import c` imports a.b, and a.b.c when c is a module
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {m for m in found if m in modules and m != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_the_graph_is_read_from_the_source():
    graph = import_graph()
    assert "chunktree.track.forest" in graph["chunktree.track.evaluate"]
    assert "chunktree.track.learned" in graph["chunktree.track.forest"]


def test_no_module_imports_itself_back():
    graph = import_graph()
    circles = sorted(m for m in graph if m in reachable(graph, m))
    assert circles == []


def test_placing_turns_imports_no_fitting_or_evaluation():
    graph = import_graph()
    above = {"chunktree.track.train", "chunktree.track.evaluate", "chunktree.track.data",
             "chunktree.track.segmentation"}
    for inference in ("chunktree.track.forest", "chunktree.track.decide", "chunktree.track.learned",
                      "chunktree.track.context"):
        assert not reachable(graph, inference) & above, inference
