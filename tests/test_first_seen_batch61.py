"""General mechanisms for failures not seen before (issue 22), written after the sixty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-07a.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
# pytorch/pytorch#123345: forward() returns its matrices converted to sparse CSR.
CSR_OUTPUTS = CORPUS / "to_sparse_csr_dynamo_sparse_csr_outputs_pytorch_123345.py"


@pytest.mark.slow
def test_a_sparse_layout_result_is_returned_dense_and_compared_densified() -> None:
    (diagnosis,) = diagnose(str(CSR_OUTPUTS), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::_to_sparse_csr"), finding
    fix = finding.fixes[0]
    # PyTorch's outputs are sparse CSR tensors: parity compares them densified with the graph's.
    assert fix.kind == "dense_sparse" and fix.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    assert fix.title.startswith("Return the dense tensor and convert it") and "to_sparse_csr" in fix.snippet


# A graph layer returning its adjacency as a COO tensor, under the TorchScript exporter.
COO_RESULT = '''
import torch
dynamo = False

class Adjacency(torch.nn.Module):
    def forward(self, x):
        scores = torch.relu(x @ x.T - 0.5)
        return x.sum(1), scores.to_sparse_coo()

def get_model():
    torch.manual_seed(0)
    return Adjacency().eval(), (torch.rand(6, 4),)
'''


@pytest.mark.slow
def test_a_coo_conversion_under_the_tracer_is_returned_dense(tmp_path: Path) -> None:
    script = tmp_path / "adjacency.py"
    script.write_text(COO_RESULT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.stage.value == "export", finding
    fix = next(f for f in finding.fixes if f.kind == "dense_sparse")
    assert fix.verified is True and fix.check is not None and fix.check.max_abs_diff < 1e-5, fix.check


# pyg-team/pytorch_geometric#7890's aggregation: scatter_reduce with include_self=False, which the
# TorchScript symbolic refuses at every opset ("ONNX does not support include_self=False").
EXCLUDING = '''
import torch
dynamo = False
opset_version = 16

class MinAggregation(torch.nn.Module):
    def forward(self, x, index):
        out = torch.zeros(3, x.shape[1])
        return out.scatter_reduce(0, index[:, None].expand_as(x), x, reduce="amin", include_self=False)

def get_model():
    torch.manual_seed(0)
    return MinAggregation().eval(), (torch.randn(7, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0]))
'''


@pytest.mark.slow
def test_a_symbolic_refusing_a_variant_at_every_opset_is_an_unsupported_op(tmp_path: Path) -> None:
    script = tmp_path / "aggregation.py"
    script.write_text(EXCLUDING)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::scatter_reduce"), finding
    assert "refuses include_self=False at every opset" in finding.message
    assert any(f.verified for f in finding.fixes), [(f.kind, f.verified, f.check) for f in finding.fixes]


# A LaMa Fourier unit (rfftn, a 1x1 conv over real/imaginary channels, irfftn) with batch, height
# and width dynamic: the dynamo exporter's opset-20 DFT declares the one-sided spectrum as wide as
# the input, and ONNX Runtime refuses the result ("Shape mismatch attempting to re-use buffer").
FOURIER_UNIT = '''
import torch
from torch import nn

dynamo = True
dynamic_shapes = {"x": {0: torch.export.Dim("batch"), 2: torch.export.Dim("h", min=8, max=256),
                        3: torch.export.Dim("w", min=8, max=256)}}


class FourierUnit(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels * 2, channels * 2, 1, bias=False)

    def forward(self, x):
        spectrum = torch.fft.rfftn(x, dim=(-2, -1), norm="ortho")
        stacked = torch.cat([spectrum.real, spectrum.imag], dim=1)
        real, imag = torch.relu(self.conv(stacked)).chunk(2, dim=1)
        return torch.fft.irfftn(torch.complex(real, imag), s=x.shape[-2:], dim=(-2, -1), norm="ortho")


def get_model():
    torch.manual_seed(0)
    return FourierUnit(4).eval(), (torch.randn(2, 4, 16, 16),)
'''


@pytest.mark.slow
def test_a_wrongly_declared_intermediate_shape_is_dropped_for_the_runtime_to_infer(tmp_path: Path) -> None:
    script = tmp_path / "fourier.py"
    script.write_text(FOURIER_UNIT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=True))
    finding = diagnosis.findings[0]
    assert finding.code == "OD501" and "re-use buffer" in finding.message, finding
    fix = finding.fixes[0]
    assert fix.kind == "shape_annotations" and fix.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    assert fix.check is not None and fix.check.max_abs_diff < 1e-4


def test_dropping_shape_annotations_keeps_inputs_and_outputs_and_refuses_a_bare_file() -> None:
    import onnx
    from onnx import TensorProto, helper

    from onnxdoctor.onnxkit.transforms import TransformError, drop_shape_annotations

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    inner = helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", 7])  # a wrong declaration
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
                              "g", [x], [y], value_info=[inner])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    dropped = drop_shape_annotations(model)
    assert not dropped.graph.value_info and len(model.graph.value_info) == 1  # the original is untouched
    assert dropped.graph.input == model.graph.input and dropped.graph.output == model.graph.output
    onnx.checker.check_model(dropped, full_check=True)
    with pytest.raises(TransformError, match="declares no shape"):
        drop_shape_annotations(dropped)
