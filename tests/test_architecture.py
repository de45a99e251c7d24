"""The arrows of docs/ARCHITECTURE.md, enforced: data flows CLI -> pipeline -> worker -> analysis -> model.

Every import in the package is read from the source (function-level imports too, since the
package imports heavy things lazily), so a new backward arrow fails here before it lands.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "onnxdoctor"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute, at any depth of the file."""
    tree = ast.parse(path.read_text("utf-8"))
    package = _module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _sources(*names: str) -> list[Path]:
    paths: list[Path] = []
    for name in names:
        path = PACKAGE / name
        paths += sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    return [p for p in paths if "templates" not in p.parts]


def _ours(imports: set[str]) -> set[str]:
    return {m for m in imports if m == "onnxdoctor" or m.startswith("onnxdoctor.")}


def _hits(imports: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in _ours(imports) if any(m == f or m.startswith(f + ".") for f in forbidden))


CALLERS = ("onnxdoctor.pipeline", "onnxdoctor.supervise", "onnxdoctor.cli", "onnxdoctor.render",
           "onnxdoctor.entry", "onnxdoctor.graph.run")
ANALYSIS = ("onnxdoctor.analysis",)


@pytest.mark.parametrize("path", _sources("worker"), ids=lambda p: p.name)
def test_the_worker_never_imports_its_callers(path: Path) -> None:
    assert _hits(_imports(path), CALLERS) == []


@pytest.mark.parametrize("path", _sources("analysis"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_analysis_never_imports_the_layers_above_it(path: Path) -> None:
    assert _hits(_imports(path), (*CALLERS, "onnxdoctor.worker", "onnxdoctor.graph")) == []


VOCABULARY = ("model", "errors", "safetext", "opsig", "protocol", "recipe")


@pytest.mark.parametrize("name", VOCABULARY)
def test_the_vocabulary_imports_only_the_standard_library(name: str) -> None:
    """The words both processes speak: the standard library and one another, nothing else."""
    imports = _imports(PACKAGE / f"{name}.py")
    ours = {m for m in _ours(imports) if m != "onnxdoctor"}
    assert {m.split(".")[0] for m in imports - ours} - STDLIB - {"onnxdoctor"} == set()
    assert {m.split(".")[1] for m in ours} <= set(VOCABULARY)


def test_the_code_table_imports_only_the_model() -> None:
    imports = _imports(PACKAGE / "codes.py")
    assert _ours(imports) <= {"onnxdoctor.model", "onnxdoctor.model.PIPELINE_STAGES", "onnxdoctor.model.Severity",
                                "onnxdoctor.model.Stage"}
    assert {m.split(".")[0] for m in imports} - STDLIB == {"onnxdoctor"}


@pytest.mark.parametrize("path", _sources("render"), ids=lambda p: p.name)
def test_renderers_only_format(path: Path) -> None:
    assert _hits(_imports(path), (*ANALYSIS, "onnxdoctor.worker", "onnxdoctor.pipeline")) == []


@pytest.mark.parametrize("path", _sources("graph", "onnxkit", "outputs", "target"), ids=lambda p: p.name)
def test_graph_and_onnx_helpers_never_reach_into_the_worker(path: Path) -> None:
    assert _hits(_imports(path), ("onnxdoctor.worker",)) == []


# The runtime probe runs in a child process of `onnxdoctor env` (`_probe_main`), never in the CLI.
CHILD_PROCESS_PROBES = {"envinfo.py", "envprobe.py"}


def test_only_the_worker_imports_torch_or_onnxruntime() -> None:
    offenders = []
    for path in _sources("."):
        if "worker" in path.relative_to(PACKAGE).parts or path.name in CHILD_PROCESS_PROBES:
            continue
        heavy = {m.split(".")[0] for m in _imports(path)} & {"torch", "onnxruntime"}
        if heavy:
            offenders.append(f"{path.relative_to(PACKAGE)}: {sorted(heavy)}")
    assert offenders == []


DRAWING_AND_TARGETS = ("graph", "targets")


@pytest.mark.parametrize("path", _sources(*DRAWING_AND_TARGETS), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_drawing_and_target_judging_never_import_the_pipeline(path: Path) -> None:
    """The command layer runs the pipeline and hands graph/ its findings; targets/ judges models
    and fixes from data, testable without a worker."""
    forbidden = ("onnxdoctor.pipeline", "onnxdoctor.supervise", "onnxdoctor.cli", "onnxdoctor.worker")
    assert _hits(_imports(path), forbidden) == []


def _private_imports(path: Path) -> list[str]:
    """`from onnxdoctor.x import _name`: another module's private name."""
    tree = ast.parse(path.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("onnxdoctor"):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


@pytest.mark.parametrize("path", _sources(*DRAWING_AND_TARGETS), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    assert _private_imports(path) == []


@pytest.mark.parametrize("folder", DRAWING_AND_TARGETS)
def test_no_file_circles(folder: str) -> None:
    """No two modules (or longer rings) of the package import each other, lazily or not."""
    modules = {_module_name(p): p for p in _sources(folder)}
    graph = {name: {m for m in _ours(_imports(path)) if m in modules and m != name}
             for name, path in modules.items()}
    # A name imported from a package (`from onnxdoctor.targets import X`) is the package itself.
    circles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            current, trail = stack.pop()
            for nxt in graph[current]:
                if nxt == start:
                    circles.append(" -> ".join([*trail, start]))
                elif nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
    assert circles == []
