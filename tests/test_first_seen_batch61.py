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
