"""Test helpers: `assert_exportable(model, args)` fails a test with what onnxdoctor found."""

from __future__ import annotations

from typing import Any

__all__ = ["assert_exportable"]


def assert_exportable(
    model: Any,
    args: Any,
    *,
    kwargs: dict[str, Any] | None = None,
    targets: tuple[str, ...] | list[str] = (),
    atol: float = 1e-4,
    rtol: float = 1e-3,
    shapes: Any = None,
    exporter: str | None = None,
    opset: int | None = None,
    fix: bool = True,
    timeout: float | None = None,
) -> None:
    """Pass silently when `model` exports, checks, runs in ONNX Runtime and matches PyTorch.

    Args:
        model: a torch.nn.Module.
        args: the example inputs (a tensor or a tuple of them).
        kwargs: example keyword inputs.
        targets: deployment targets the model must also suit (docs/targets.md).
        atol: absolute tolerance of the comparison with PyTorch.
        rtol: relative tolerance of the comparison with PyTorch.
        shapes: the export's `dynamic_shapes` (torch.export's spec): the dimensions that must
            stay dynamic.
        exporter: "dynamo", "torchscript" or "both"; None: torch's default.
        opset: the opset version to export at.
        fix: on failure, verify fixes so that the message names the best one (costs exports).
        timeout: seconds for the whole check (default 600).

    Raises:
        AssertionError: the model is not healthy; the message lists each error's code, op,
            source line and the best verified fix.
    """
    from onnxdoctor.api import diagnose

    # fix=True costs nothing on a healthy model: fixes are planned only for a failing run.
    diagnosis = diagnose(model, args, kwargs, fix=fix, exporter=exporter, opset=opset, targets=targets,
                         dynamic_shapes=shapes, timeout=timeout, atol=atol, rtol=rtol)
    if diagnosis.healthy:
        return
    from onnxdoctor.render.assertion import failure_message

    raise AssertionError(failure_message(diagnosis.runs or (diagnosis,)))
