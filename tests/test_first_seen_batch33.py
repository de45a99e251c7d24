"""General mechanisms for failures not seen before (issue 22), written after the thirty-third
first-seen batch (fixtures/corpus/first_seen_2026-12-05x.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# detectron2's paste_masks_in_image (detectron2#4907) in small: a function scripted while tracing
# returns a uint8 constant on one side and a bool mask on the other; ONNX's If takes one type.
MIXED_BRANCHES = '''
import torch
dynamo = False
opset_version = 16
input_names = ["x"]
dynamic_axes = {"x": {0: "n"}}

@torch.jit.script_if_tracing
def masks(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        return torch.zeros(x.shape, dtype=torch.uint8)
    return x > 0

class M(torch.nn.Module):
    def forward(self, x):
        return masks(x * 2)

def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(3, 4),)
'''


@pytest.mark.slow
def test_if_branches_of_different_types_are_cast_to_one(tmp_path: Path) -> None:
    script = tmp_path / "masks.py"
    script.write_text(MIXED_BRANCHES, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD304", "If"), finding.message
    best = finding.fixes[0]
    # The example takes the bool side: bool is PyTorch's type there, uint8 would be OD604.
    assert best.recipe is not None and best.recipe.kind == "align_if_branches" and best.verified, \
        [(f.title, f.verified) for f in finding.fixes]
    assert "bool" in best.title


@pytest.mark.slow
def test_a_branch_on_a_share_of_values_over_a_size_is_named_at_its_comparison() -> None:
    # LightGlue's early stop: (conf < t).float().sum() / (m + n) > 0.95 reads the data, not sizes.
    (diagnosis,) = diagnose(str(CORPUS / "early_stop_frozen_lightglue_matcher_lightglue_onnx_62.py"),
                            DiagnoseOptions(fix=False, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD210", "aten::gt"), finding.message


EARLY_EXIT = '''
import torch
dynamo = True
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    def forward(self, x):
        h = self.a(x)
        entropy = -(h.softmax(-1) * h.log_softmax(-1)).sum()
        if entropy < 0.5:
            return h
        return self.b(h)
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(2, 4),)
'''


def test_a_branch_torch_export_cannot_decide_is_named_at_its_comparison(tmp_path: Path) -> None:
    # LGViT's `if highway_entropy < threshold:` (LGViT#4): the symbol torch.export made is the
    # bool of the comparison, which the branch reads.
    script = tmp_path / "exit.py"
    script.write_text(EARLY_EXIT, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=False, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.torch_op) == ("OD204", "aten::lt"), finding.message
    assert "exit.py:11 reads the tensor result of aten::lt" in finding.message
