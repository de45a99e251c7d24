"""General mechanisms for failures not seen before (issue 22), written after the thirty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-05v.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_rewrite_for_a_torchscript_script_keeps_its_dynamic_axes() -> None:
    # UperNet's pyramid pooling with dynamic batch, height and width: the TorchScript exporter
    # refuses adaptive_avg_pool2d ("input size not accessible"); the library's rewrite, captured by
    # torch.export with the script's dynamic_axes as dynamic_shapes (batch 1 doubled so that it
    # stays dynamic), is checked at get_inputs2's other batch and sizes.
    path = CORPUS / "adaptive_avg_pool2d_input_size_not_accessible_dynamic_hw_upernet_ppm_mmsegmentation_1840.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::adaptive_avg_pool2d")
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified and "Dim.AUTO" in best.snippet, \
        [(f.title, f.verified) for f in finding.fixes]


# Failures the batch's helpers met while probing, with no public thread to make corpus files of.
CLAMP_INT16 = '''
import torch
dynamo = False
opset_version = 17
class M(torch.nn.Module):
    def forward(self, x):
        return torch.clamp(x, -5, 5)
def get_model():
    return M().eval(), (torch.tensor([[-9, 3, 7], [2, -1, 12]], dtype=torch.int16),)
'''

ONE_HOT = '''
import torch
import torch.nn.functional as F
dynamo = False
opset_version = 17
class M(torch.nn.Module):
    def forward(self, labels):
        return F.one_hot(labels).float() * 2
def get_model():
    return M().eval(), (torch.tensor([0, 3, 1, 2]),)
'''

SIZED_UPSAMPLE = '''
import torch
dynamo = False
opset_version = 17
input_names = ["x", "skip"]
dynamic_axes = {"x": {2: "h", 3: "w"}, "skip": {2: "H", 3: "W"}}
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1)
    def forward(self, x, skip):
        return torch.cat([self.up(x, output_size=skip.shape[-2:]), skip], 1)
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(1, 4, 5, 5), torch.randn(1, 4, 10, 10))
def get_inputs2():
    return (torch.randn(1, 4, 6, 7), torch.randn(1, 4, 11, 14))
'''


def _first(tmp_path: Path, source: str) -> object:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_a_node_run_as_its_function_body_is_named_and_cast(tmp_path: Path) -> None:
    # int16 Clip has no kernel; ONNX Runtime expands it into its body and names the body's Where.
    finding = _first(tmp_path, CLAMP_INT16)
    assert (finding.code, finding.op, finding.node) == ("OD402", "Clip", "/Clip"), finding.message
    assert "function body's Where" in finding.message
    assert finding.fixes[0].kind == "cast" and finding.fixes[0].verified


@pytest.mark.slow
def test_one_hot_without_num_classes_counts_its_classes_at_run_time(tmp_path: Path) -> None:
    finding = _first(tmp_path, ONE_HOT)
    assert finding.code == "OD304" and finding.onnx_op == "OneHot"
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified and "aten::one_hot" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_a_transposed_convolution_given_output_size_is_cropped_at_run_time(tmp_path: Path) -> None:
    # The tracer fixes output_padding at the example; the crop follows get_inputs2's sizes.
    finding = _first(tmp_path, SIZED_UPSAMPLE)
    assert finding.code == "OD210", finding.message  # different at get_inputs2 (OD802 with --check-shapes)
    best = finding.fixes[0]
    assert best.kind == "cropped_conv_transpose" and best.verified, [(f.title, f.verified) for f in finding.fixes]


NEGATIVE_FLOOR_DIVISION = '''
import torch
from torch.export import Dim
dynamo = True
dynamic_shapes = {"x": {1: Dim.AUTO}}
class M(torch.nn.Module):
    def forward(self, x):
        return x[:, :-((-x.shape[1]) // 4)] * 2  # ceil(n / 4) columns
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(2, 12),)
def get_inputs2():
    return (torch.randn(2, 10),)
'''


@pytest.mark.slow
def test_floor_division_of_sizes_is_translated_with_pythons_rounding(tmp_path: Path) -> None:
    # The exporter's integer Div truncates -10 // 4 to -2: ceil(10 / 4) comes out 2, not 3.
    finding = _first(tmp_path, NEGATIVE_FLOOR_DIVISION)
    assert finding.code in ("OD210", "OD803"), finding.message
    best = finding.fixes[0]
    assert best.kind == "scalar_translation" and best.verified and "floor division" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]
