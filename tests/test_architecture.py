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


# No private names across modules and no file circles, package-wide: tests/test_architecture_house.py.
