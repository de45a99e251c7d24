"""What a `--write-fix` fix.py calls: the same loading, snippet running and checking the worker does.

A written fix.py must run as written in a fresh process and do what onnxdoctor verified, so it
uses the worker's own pieces rather than a second copy of them: the model-script protocol
(`load`), fix code run with the script's globals from a real file (`run_code`, which the worker
uses too), the dynamic_shapes corrections, the ONNX rewrites, and an ONNX Runtime check against
PyTorch's outputs (`check`).
"""

from __future__ import annotations

import os
import runpy
import tempfile
import time
from pathlib import Path
from typing import Any

from onnxdoctor.recipe import DynamicShapes, QuantizeOnnx, RewriteOnnx
from onnxdoctor.worker.loader import LoadedModel, load_script


def load(script: str, factory: str | None = None) -> LoadedModel:
    """Build the model from the user's script, as `onnxdoctor diagnose` does."""
    import torch

    torch.manual_seed(0)
    return load_script(Path(script), factory)


def run_code(code: str, loaded: LoadedModel | None, name: str, folder: Path | None = None) -> dict[str, Any]:
    """Run fix code as the user would paste it into their script: with the script's globals.

    The code runs from a real file because onnxscript reads function source with inspect. It sees
    `model` and `example_inputs`; the names it defines are returned.
    """
    import torch

    scope: dict[str, Any] = dict(loaded.namespace) if loaded is not None else {}
    scope.pop("__file__", None)
    scope.update(torch=torch)
    if loaded is not None:
        scope.update(model=loaded.model, example_inputs=loaded.args)
    where = folder or Path(tempfile.mkdtemp(prefix="onnxdoctor-fix-"))
    path = where / f"{name}_{os.getpid()}_{time.monotonic_ns()}.py"
    path.write_text(code, "utf-8")
    return runpy.run_path(str(path), init_globals=scope)


def reference_call(loaded: LoadedModel) -> Any:
    """forward() at the example inputs, as the reference for parity: seeded, without gradients, and
    on a copy of a model in training mode (batch norm would update its running statistics)."""
    import copy

    import torch

    model = copy.deepcopy(loaded.model) if getattr(loaded.model, "training", False) else loaded.model
    torch.manual_seed(0)
    with torch.no_grad():
        return model(*loaded.args, **loaded.kwargs)


def reference_outputs(loaded: LoadedModel) -> list[Any]:
    """PyTorch's outputs at the example inputs, as tensors (the numbers the export must match)."""
    from onnxdoctor.worker.facts import _tensor_leaves

    return _tensor_leaves(reference_call(loaded))


def dynamic_shapes(settings: dict[str, Any], correction: DynamicShapes | None) -> Any:
    """The script's dynamic_shapes with a fix's corrections applied."""
    from onnxdoctor.worker.facts import _corrected_keys, _with_suggested_dims

    shapes = settings.get("dynamic_shapes")
    if correction is None:
        return shapes
    shapes = _corrected_keys(shapes, dict(correction.rename), correction.pack, correction.missing)
    return _with_suggested_dims(shapes, list(correction.suggested))


def rewrite_file(path: str | Path, rewrites: list[RewriteOnnx]) -> None:
    """Apply a fix's ONNX rewrites to the file, in place."""
    import onnx

    from onnxdoctor.onnxkit.transforms import apply_transform

    model = onnx.load(str(path))
    for rewrite in rewrites:
        model = apply_transform(model, rewrite.transform)
    onnx.save(model, str(path))


def check(path: str | Path, reference: list[Any] | None, loaded: LoadedModel | None, *,
          libraries: tuple[str, ...] = (), extensions: bool = False, atol: float = 1e-4,
          rtol: float = 1e-3) -> float | None:
    """Load and run the written model in ONNX Runtime; compare with PyTorch's outputs.

    Returns the largest absolute difference (None without a reference).

    Raises:
        SystemExit: the outputs differ beyond the tolerances (the message says how).
    """
    from onnxdoctor.worker.facts import _tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs
    from onnxdoctor.worker.runtime import (
        _feeds_for_session,
        _random_feeds,
        _run_session,
        cpu_session,
    )

    if extensions:
        from onnxruntime_extensions import get_library_path

        libraries = (*libraries, get_library_path())
    session = cpu_session(str(path), libraries)
    if loaded is None:
        feeds, _described = _random_feeds(session, {}, 256 * 1024 * 1024)
        _run_session(session, feeds)
        print(f"{path}: loads and runs in ONNX Runtime")
        return None
    got = _run_session(session, _feeds_for_session(session, _tensor_leaves((loaded.args, loaded.kwargs))))
    report = compare_outputs(reference or [], got, atol, rtol)
    if report["code"]:
        raise SystemExit(f"{path}: {report['message']}")
    print(f"{path}: matches PyTorch (max abs diff {report['max_abs_diff']:.3g})")
    return report["max_abs_diff"]


def quantize_file(path: str | Path, step: QuantizeOnnx) -> Path:
    """Quantize the float model at `path` with ONNX Runtime's dynamic quantization; return the
    quantized file (beside it)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = Path(path)
    quantized = source.with_name(source.stem + "-quantized.onnx")
    quantize_dynamic(str(source), str(quantized), weight_type=getattr(QuantType, step.weight_type),
                     reduce_range=step.reduce_range)
    return quantized


def quantization_atol(reference: list[Any], tolerance: float) -> float:
    """The absolute tolerance for comparing two quantized models: a fraction of the largest
    |output| (each model rounds its activations on its own)."""
    import torch

    largest = max((float(t.detach().abs().max()) for t in reference
                   if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point()), default=1.0)
    return tolerance * max(largest, 1e-6)
