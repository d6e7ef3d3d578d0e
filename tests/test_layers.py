"""The layout's import rule (docs/design.md, "Layers"): imports point down only. Every import of a
chunktree module, at the top of a file or inside a function, is read from the source."""

import ast
from pathlib import Path

import chunktree

PACKAGE = Path(chunktree.__file__).parent
# Each layer and the layers below it that it may import; the base modules are below every layer.
BASE = {"checks", "progress", "paths", "files", "cpu"}
MAY_IMPORT = {
    "kernels": {"kernels"},
    "models": {"models", "kernels"},
    "engine": {"engine", "models", "kernels"},
    "track": {"track", "engine", "models", "kernels"},
    "integrations": {"integrations", "engine", "models", "kernels"},
    "apps": {"apps", "track", "integrations", "engine", "models", "kernels"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.startswith("chunktree.")]


def test_imports_point_down_only():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        layer = parts[0]
        if layer not in MAY_IMPORT:  # the package's own __init__ and __main__, and the base modules
            if layer in BASE:
                wrong += [f"{path.name}:{line} imports {name}" for line, name in _imports(path)
                          if name.split(".")[1] not in BASE]
            continue
        allowed = MAY_IMPORT[layer] | BASE
        wrong += [f"{'/'.join(parts)}.py:{line} imports {name}" for line, name in _imports(path)
                  if name.split(".")[1] not in allowed]
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_every_module_belongs_to_a_layer():
    tops = {p.relative_to(PACKAGE).with_suffix("").parts[0] for p in PACKAGE.rglob("*.py")}
    assert tops <= set(MAY_IMPORT) | BASE | {"__init__", "__main__"}, tops - set(MAY_IMPORT) - BASE
