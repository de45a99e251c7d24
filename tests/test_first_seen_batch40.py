"""General mechanisms for failures not seen before (issue 22), written after the fortieth
first-seen batch (fixtures/corpus/first_seen_2026-12-05ze.txt)."""

from __future__ import annotations

import torch

from onnxdoctor.worker.shapes import size_code_lines


class _Doubled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_the_size_check_reads_no_source_of_a_scripted_model() -> None:
    # timm's scriptable tf_efficientdet stem (pytorch/pytorch#55900): the check at other sizes
    # stopped (OD899) on torch's _CachedForward, which raises when forward is read off the class.
    assert size_code_lines(torch.jit.script(_Doubled())) == []
    assert size_code_lines(_Doubled()) == []


def _sizes_finding(entry: dict, declared: list[dict], exporter: str = "torchscript", onnx_dim0: object = "T") -> object:
    from onnxdoctor.analysis.shapes import classify_shapes
    from onnxdoctor.model import StageOutcome, Status
    from onnxdoctor.model import Stage as S

    facts = {"example": {"x": [4, 1, 8, 8]}, "onnx_inputs": {"x": [onnx_dim0, 1, 8, 8]}, "declared": declared,
             "exporter": exporter, "sizes": [entry]}
    (found,) = classify_shapes(StageOutcome(S.SHAPES, Status.PASSED, facts=facts), [])
    return found


def test_outputs_of_another_shape_at_other_sizes_say_so_rather_than_a_zero_difference() -> None:
    # EfficientNet's TF "same" padding frozen by the tracer: 65x67 gives 16x16 where PyTorch gives 17x17.
    entry = {"inputs": {"x": [7, 1, 8, 8]}, "varied": [["x", 0]], "status": "failed", "kind": "mismatch",
             "max_abs_diff": 0.0, "error": "output 0: shape (1, 24, 16, 16) from ONNX Runtime, (1, 24, 17, 17) from PyTorch"}
    found = _sizes_finding(entry, [{"input": "x", "dim": 0, "name": "T", "min": None, "max": None}])
    assert found.code == "OD803" and "(output 0: shape (1, 24, 16, 16)" in found.message, found.message
    assert "max abs diff 0" not in found.message


def test_a_dim_is_named_as_the_script_declared_it() -> None:
    # spikingjelly#587: dim 0 is the time steps T, which the dynamo exporter specialised.
    entry = {"inputs": {"x": [7, 1, 8, 8]}, "varied": [["x", 0]], "status": "refused", "kind": "input"}
    found = _sizes_finding(entry, [{"input": "x", "dim": 0, "name": "T", "min": None, "max": None}], "dynamo", 4)
    assert found.code == "OD804" and "x dim 0 (T)" in found.message and "(batch)" not in found.message, found.message


ROUND_AT_OPSET_9 = '''
import torch
dynamo = False
opset_version = 9
class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        return torch.round(x * scale) / scale
    @staticmethod
    def backward(ctx, grad):
        return grad, None
class Quantize(torch.nn.Module):
    def forward(self, x):
        return RoundSTE.apply(torch.clamp(x, -1, 1), 7.0)
def get_model():
    return Quantize().eval(), (torch.randn(3, 5),)
'''


def test_the_opset_fix_starts_where_the_exporter_says_support_starts(tmp_path) -> None:
    # IntelLabs/distiller#23: aten::round has a registration at opset 10 that only refuses; the
    # exporter says support starts at 11, which is the opset to try.
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import diagnose

    script = tmp_path / "model.py"
    script.write_text(ROUND_AT_OPSET_9, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD201", "aten::round"), finding.message
    best = finding.fixes[0]
    assert (best.title, best.verified) == ("Export at opset 11", True), [(f.title, f.verified) for f in finding.fixes]
