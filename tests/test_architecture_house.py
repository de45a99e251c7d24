"""The house rules of docs/ARCHITECTURE.md, package-wide: no module imports another module's private
names, and no two files (or longer rings) import each other, lazily or not.

Read from the source like tests/test_architecture.py, so a new private import or circle fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "onnxdoctor"


def _sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "templates" not in p.parts]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node, path)
            if module == "onnxdoctor" or module.startswith("onnxdoctor."):
                found += [f"{module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = sorted(f"{path.relative_to(PACKAGE)}: {name}" for path in _sources() for name in _private_imports(path))
    assert found == [], "make the shared name public, or move the code to where it is used"


def _edges(path: Path, modules: set[str]) -> set[str]:
    """The package's files `path` imports. `from package import submodule` is the submodule (as
    `import package.submodule` is), not the package's own file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, path)
            submodules = {f"{module}.{alias.name}" for alias in node.names} & modules
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(module)
    return (found & modules) - {_module_name(path)}


def _circles() -> set[str]:
    paths = {_module_name(p): p for p in _sources()}
    graph = {name: _edges(path, set(paths)) for name, path in paths.items()}
    circles = set()
    for start in graph:  # every simple ring through `start`, written from its smallest member
        stack = [(start, [start])]
        while stack:
            current, trail = stack.pop()
            for following in graph[current]:
                if following == start and start == min(trail):
                    circles.add(" -> ".join(trail))
                elif following not in trail and following > start:
                    stack.append((following, [*trail, following]))
    return circles


def test_no_import_circles_between_files() -> None:
    assert sorted(_circles()) == [], "a file circle: move what both need to a third module"
