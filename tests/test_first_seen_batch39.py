"""General mechanisms for failures not seen before (issue 22), written after the thirty-ninth
first-seen batch (fixtures/corpus/first_seen_2026-12-05zd.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


def _first(tmp_path: Path, source: str, **options: object) -> object:
    """The first finding for `source` written as a script (fixes as `options` say)."""
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, **options))
    return diagnosis.findings[0]


# FastPitch's length regulator (pytorch/pytorch#52252): torch.cumsum promotes int32 durations to
# int64, the TorchScript exporter's CumSum keeps int32, and an Unsqueeze carries it to the output.
INT32_CUMSUM = '''
import torch
dynamo = False
opset_version = 13
class M(torch.nn.Module):
    def forward(self, durations):
        return torch.cumsum(durations, dim=1).unsqueeze(1)
def get_model():
    return M().eval(), (torch.tensor([[2, 0, 3], [1, 1, 4]], dtype=torch.int32),)
'''


@pytest.mark.slow
def test_an_output_type_is_named_where_it_was_made_not_where_it_was_carried(tmp_path: Path) -> None:
    finding = _first(tmp_path, INT32_CUMSUM, fix=False)
    assert (finding.code, finding.op, finding.onnx_op) == ("OD604", "aten::cumsum", "CumSum"), finding.message


# pytorch/pytorch#81085's shape: a scripted encoder whose forward calls a torch.jit.ignore helper.
IGNORED_HELPER = '''
import torch
dynamo = False
opset_version = 17
class Enc(torch.nn.Module):
    @torch.jit.ignore
    def mask(self, lengths: torch.Tensor, n: int) -> torch.Tensor:
        return torch.arange(n)[None, :] < lengths[:, None]
    def forward(self, x, lengths):
        return x * self.mask(lengths, x.shape[1]).unsqueeze(-1).float()
def get_model():
    return torch.jit.script(Enc().eval()), (torch.randn(2, 5, 3), torch.tensor([3, 5]))
'''


@pytest.mark.slow
def test_a_python_function_left_in_a_scripted_graph_is_named_with_its_node(tmp_path: Path) -> None:
    finding = _first(tmp_path, IGNORED_HELPER, fix=False)
    assert (finding.code, finding.op, finding.torch_op) == ("OD299", "mask", "prim::PythonOp"), finding.message
    assert "torch.jit.ignore" in finding.message
