"""Deployment targets: where the exported model has to run (docs/targets.md).

`ort-cpu` is the pipeline itself (ONNX Runtime on this CPU). `openvino` is the real OpenVINO
runtime, run inside the worker. `tensorrt`, `coreml`, `ort-web` and `ort-cuda` are static verdicts
from each runtime's published operator table, shipped in `targets/tables/`: a static verdict is not
a run.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from onnxdoctor.targets.verdict import NodeStatus, NodeVerdict, TargetResult

__all__ = [
    "DEFAULT_TARGET",
    "TARGETS",
    "NodeStatus",
    "NodeVerdict",
    "TargetInfo",
    "TargetResult",
    "UnknownTargetError",
    "available",
    "get_target",
    "resolve_targets",
]

DEFAULT_TARGET = "ort-cpu"
OPENVINO_INSTALL = "pip install 'onnxdoctor[openvino]'  (or: pip install openvino)"


@dataclass(frozen=True)
class TargetInfo:
    """A deployment target: its name, how it is checked, and what it stands for."""

    name: str
    kind: str  # "pipeline" (ort-cpu), "runtime" (a real run in the worker), "table" (static)
    description: str
    module: str = ""  # the Python module a runtime target needs


TARGETS: tuple[TargetInfo, ...] = (
    TargetInfo("ort-cpu", "pipeline", "ONNX Runtime, CPU execution provider (the pipeline's own run)"),
    TargetInfo("openvino", "runtime", "OpenVINO runtime, CPU plugin: read, compile, run, compare", "openvino"),
    TargetInfo("tensorrt", "table", "TensorRT ONNX parser operator table (static)"),
    TargetInfo("coreml", "table", "ONNX Runtime CoreML execution provider operator list (static)"),
    TargetInfo("ort-web", "table", "ONNX Runtime Web WebGPU execution provider operator list (static)"),
    TargetInfo("ort-cuda", "table", "ONNX Runtime CUDA execution provider kernel table (static; "
               "ops without a CUDA kernel fall back to the CPU provider); a real run where a GPU is"),
    TargetInfo("ort-tensorrt", "runtime", "ONNX Runtime TensorRT execution provider on a GPU (a real run; "
               "needs onnxruntime-gpu built with TensorRT and a GPU)", "onnxruntime"),
)
# Targets ONNX Runtime runs for real with a GPU execution provider (onnxdoctor.worker.ep_target).
GPU_PROVIDERS: dict[str, str] = {"ort-cuda": "CUDAExecutionProvider", "ort-tensorrt": "TensorrtExecutionProvider"}
_BY_NAME = {t.name: t for t in TARGETS}


class UnknownTargetError(ValueError):
    """A --target name that is not a known target."""


def get_target(name: str) -> TargetInfo:
    """The target called `name`.

    Raises:
        UnknownTargetError: no such target; the message lists the known ones.
    """
    try:
        return _BY_NAME[name.strip().lower()]
    except KeyError:
        known = ", ".join(t.name for t in TARGETS)
        raise UnknownTargetError(f"unknown target {name!r}; known targets: {known}, all") from None


def resolve_targets(names: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Expand `all`, drop duplicates, keep order; ort-cpu always comes first (it is the pipeline).

    Raises:
        UnknownTargetError: a name is not a target.
    """
    wanted: list[str] = [DEFAULT_TARGET]
    for name in names or ():
        for part in str(name).split(","):
            if not part.strip():
                continue
            if part.strip().lower() == "all":
                wanted += [t.name for t in TARGETS]
            else:
                wanted.append(get_target(part).name)
    return tuple(dict.fromkeys(wanted))


def available(name: str, providers: list[str] | None = None) -> tuple[bool, str]:
    """Whether a target can be checked here, and one line saying what it uses (no heavy import).

    `providers`: ONNX Runtime's available execution providers, from `onnxdoctor env`'s probe
    (None: not known; this process never imports onnxruntime).
    """
    info = get_target(name)
    if info.kind == "pipeline":
        return True, "ONNX Runtime (the pipeline's own run)"
    if name in GPU_PROVIDERS:
        ok, line = _gpu_run(name, providers)
        if info.kind == "runtime":
            return ok, line
        static_ok, static = _static(name)
        return static_ok, f"{static}; {line}"
    if info.kind == "runtime":
        if importlib.util.find_spec(info.module) is None:
            return False, f"{info.module} is not installed: {OPENVINO_INSTALL}"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return True, f"{info.module} {version(info.module)} (real run on CPU)"
        except PackageNotFoundError:
            return True, f"{info.module} (real run on CPU)"
    return _static(name)


def _gpu_run(name: str, providers: list[str] | None) -> tuple[bool, str]:
    wanted = GPU_PROVIDERS[name]
    if providers is None:
        return False, f"real run: needs {wanted} (not probed)"
    if wanted in providers:
        return True, f"real run with {wanted} when a GPU is visible"
    return False, f"no real run: this onnxruntime has no {wanted} (install onnxruntime-gpu; needs a GPU)"


def _static(name: str) -> tuple[bool, str]:
    from onnxdoctor.targets.tables import load_table

    try:
        table = load_table(name)
    except (OSError, ValueError) as e:
        return False, f"capability table missing or unreadable: {e}"
    from onnxdoctor.targets.tables import source_line

    return True, f"static table ({len(table.rows)} ops): {source_line(table.source)}"
