"""General mechanisms for failures not seen before (issue 22), written after the sixty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-07g.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# pytorch#65039: LaneGCN's lane fusion adds each relation's Linear output into the lane nodes with
# index_add_, whose destinations repeat; the TorchScript export at opset 12 writes a scatter
# without a sum. The exporter converts the relations' Linear calls in another order than the trace
# ran them, so the call-by-call search must not pin the difference on one of them.
LANE_FUSION = Path(__file__).parents[1] / "fixtures" / "corpus" / "index_add_duplicate_lane_edges_opset12_lanegcn_mapnet_pytorch_65039.py"


@pytest.mark.slow
def test_a_mismatch_is_not_pinned_on_a_call_the_exporter_converted_out_of_trace_order(tmp_path: Path) -> None:
    script = tmp_path / "fusion.py"
    script.write_text(LANE_FUSION.read_text())
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = next(f for f in diagnosis.findings if f.code == "OD601")
    assert finding.op == "aten::index_add", (finding.op, finding.message)


# sean-wade/tnt_vectornet_with_tensorrt#5: a polyline max-pool through torch_scatter's
# scatter_max, here registered with torch.library.custom_op(name, function): the script's name for
# the function is the plain function, not the op object decorating would have made it.
SCATTER_MAX = '''
import torch
from torch import nn
dynamo = False

def _scatter_max(src: torch.Tensor, index: torch.Tensor, dim_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.full((dim_size, src.shape[1]), float("-inf")).scatter_reduce(
        0, index[:, None].expand_as(src), src, "amax", include_self=True)
    return out, torch.zeros(dim_size, src.shape[1], dtype=torch.long)

try:
    torch.ops.testscatter.scatter_max
except (AttributeError, RuntimeError):
    _op = torch.library.custom_op("testscatter::scatter_max", _scatter_max, mutates_args=())
    _op.register_fake(lambda src, index, dim_size: (src.new_empty(dim_size, src.shape[1]),
                                                   src.new_empty(dim_size, src.shape[1], dtype=torch.long)))

class Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(3, 4)

    def forward(self, x, cluster):
        pooled, _ = torch.ops.testscatter.scatter_max(self.mlp(x), cluster, 3)
        return pooled

def get_model():
    torch.manual_seed(0)
    return Pool().eval(), (torch.randn(7, 3), torch.tensor([0, 0, 1, 2, 2, 2, 1]))
'''


@pytest.mark.slow
def test_a_custom_op_registered_from_a_plain_function_is_decomposed_through_that_function(tmp_path: Path) -> None:
    script = tmp_path / "scatter_max.py"
    script.write_text(SCATTER_MAX)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, all_fixes=True))
    finding = next(f for f in diagnosis.findings if f.code == "OD203")
    fix = next(f for f in finding.fixes if f.kind == "decompose")
    assert "testscatter.scatter_max.default: _scatter_max}" in fix.snippet, fix.snippet
    assert fix.verified is True, fix.check
