"""General mechanisms for failures not seen before (issue 22), written after the ninety-eighth and
later first-seen batches (fixtures/corpus/first_seen_2026-12-08l.txt onwards)."""

from __future__ import annotations

from pathlib import Path

from diagnosed import first_finding

from onnxdoctor.analysis.judge import to_try
from onnxdoctor.model import DiagnoseOptions, Finding, Fix, Severity, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import DeclareDynamic, Recipe
from onnxdoctor.worker.shapes import _size_sets, _stride_of

# Windows built from the input's own strides (pytorch#90607): the tracer records x.stride() as the
# example's numbers, so with every dim declared dynamic the graph reads other elements at any other size.
STRIDES_FROM_INPUT = '''import torch

dynamo = False
opset_version = 14
input_names = ["x"]
dynamic_axes = {"x": {0: "a", 1: "b", 2: "c"}}


class Windows(torch.nn.Module):
    def forward(self, x):
        a, b, c = x.size()
        s = x.stride()
        return x.as_strided(size=(a, b // 2, 4), stride=(s[0] // 2, s[1] - 3, 3)) * 2.0


def get_model():
    return Windows().eval(), (torch.randn(6, 10, 5),)


def get_inputs2():
    return (torch.randn(8, 14, 7),)
'''

# Overlapping windows over a slice that reach past its end into the parent (onnxruntime#28342):
# eager reads the parent's storage; both exporters gather from the slice, out of bounds.
WINDOWS_PAST_A_SLICE = '''import torch

dynamo = True


class Taps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.linspace(0.5, 1.5, 12))
        self.taps = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = x * self.gain
        return self.taps(torch.as_strided(h[0:6], size=(6, 4), stride=(1, 1)))


def get_model():
    torch.manual_seed(0)
    return Taps().eval(), (torch.randn(12),)
'''


def test_windows_from_the_inputs_strides_follow_its_size_as_a_gather(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, STRIDES_FROM_INPUT, "OD803")
    assert finding.op == "aten::as_strided"
    fix = next(f for f in finding.fixes if f.kind == "strided_views")
    assert fix.verified, fix.check
    assert fix.check.sizes  # held at sizes other than the example's, where the frozen strides differ


def test_windows_that_reach_past_a_slice_read_its_parent_as_eager_does(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, WINDOWS_PAST_A_SLICE, "OD501")
    assert "aten::as_strided" in (finding.op, finding.torch_op)
    fix = next(f for f in finding.fixes if f.kind == "strided_views")
    assert fix.verified, fix.check


# A strided network exported at one size with nothing declared (RapidLayout#3, MewZoom#3): eager
# runs other batches and any multiple of its stride, but one pixel more breaks the skip connection.
STRIDED_AT_ONE_SIZE = '''import torch
import torch.nn.functional as F

dynamo = False
opset_version = 17
input_names = ["images"]


class Strided(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.deeper = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(8, 2, 1)

    def forward(self, images):
        skip = self.down(images)
        up = F.interpolate(self.deeper(skip), scale_factor=2.0, mode="nearest")
        return self.head(skip + up)


def get_model():
    torch.manual_seed(0)
    return Strided().eval(), (torch.rand(1, 3, 64, 64),)
'''


def test_a_fixed_size_export_with_nothing_else_wrong_gets_its_declaration_verified_at_a_multiple_of_its_stride(
        tmp_path: Path) -> None:
    finding = first_finding(tmp_path, STRIDED_AT_ONE_SIZE, "OD801")
    # 65 pixels is refused by eager itself; 128 (the size's stride, 64, further) is not.
    assert "images dim 2 = 64" in finding.message and "images dim 3 = 64" in finding.message, finding.message
    assert "takes only its example's sizes" in finding.message
    fix = next(f for f in finding.fixes if f.kind == "declare_dynamic")
    # Tried under --fix without --all-fixes: nothing else was wrong.
    assert fix.verified, fix.check
    assert any(size.endswith(("x128x128", "x192x192")) for size in fix.check.sizes), fix.check.sizes


# Codebooks quantized in forward and looked up by code (pytorch#126065): the TorchScript exporter
# has no quantized Gather.
QUANTIZED_LOOKUP = '''import torch

dynamo = False
opset_version = 17


class Lookup(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("codebook", torch.randn(16, 4) * 0.5)

    def forward(self, codes):
        q = torch.quantize_per_tensor(self.codebook, 0.05, 0, torch.qint8)
        return torch.dequantize(q[codes]).sum(-1)


def get_model():
    torch.manual_seed(0)
    return Lookup().eval(), (torch.randint(0, 16, (6,)),)
'''


def test_a_tensor_quantized_in_forward_and_indexed_is_exported_on_its_grid_in_float(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, QUANTIZED_LOOKUP, "OD299")
    fix = next(f for f in finding.fixes if f.kind == "fake_quantized")
    assert fix.verified, fix.check
    assert fix.check.max_abs_diff is not None and fix.check.max_abs_diff < 1e-6  # the same grid values


def test_a_function_the_exporter_cannot_inline_applied_at_two_widths_gets_a_kernel_node_of_free_sizes() -> None:
    # mmcv's _DynamicScatter (mmdeploy#2460): a Function around a compiled op, applied by two
    # voxel-encoder layers of other widths, and its voxel count is the data's. Its node declares
    # types and ranks only: the first call's sizes broke the second layer's MatMul.
    path = Path(__file__).resolve().parent.parent / "fixtures" / "corpus" / \
        "dynamic_scatter_custom_op_mvxnet_dynamic_vfe_mmdeploy_2460.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "_DynamicScatter"), finding.message
    kernel = next(f for f in finding.fixes if f.kind == "function_kernel")
    assert "with_sizes([None] * 2)" in kernel.snippet
    assert kernel.verified, kernel.check


# A two-layer GRU whose time steps torch.export specialises to the example's (pytorch#126339):
# the dynamo export writes the input at that length, whatever dynamic_shapes declared.
GRU_TIME_DIM = '''import torch
from torch.export import Dim

dynamo = True
opset_version = 18
input_names = ["x"]
dynamic_shapes = {"x": {0: Dim("batch", max=64), 1: Dim("time", max=500)}}


class Speech(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(6, 8, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out)


def get_model():
    torch.manual_seed(0)
    return Speech().eval(), (torch.randn(2, 11, 6),)
'''


def test_a_declared_dim_torch_export_specialised_is_declared_to_the_torchscript_exporter_instead(
        tmp_path: Path) -> None:
    finding = first_finding(tmp_path, GRU_TIME_DIM, "OD208")
    fix = next(f for f in finding.fixes if f.kind == "exporter")
    assert "dynamic_axes = {'x': {0: 'batch', 1: 'time'}}" in fix.snippet, fix.snippet
    assert fix.verified, fix.check
    # Checked at other lengths than the example's 11 (sizes read "x=3x12x6").
    lengths = {int(size.split("=", 1)[1].split("x")[1]) for size in fix.check.sizes}
    assert lengths - {11}, fix.check.sizes


def test_a_strided_dim_is_stepped_by_its_power_of_two_stride_and_its_sizes_are_multiples_of_it() -> None:
    assert (_stride_of(1024), _stride_of(224), _stride_of(96), _stride_of(100), _stride_of(7)) == (64, 32, 32, 0, 0)
    sets = _size_sets([([("images", 2), ("images", 3)], 1, None, 64)], {"images": [1, 3, 1024, 1024]})
    assert [s["images"][2] for s in sets] == [1088, 1152, 960], sets
    assert all(s["images"][2] == s["images"][3] for s in sets)


def test_a_fixed_size_warnings_declaration_waits_while_an_error_stands() -> None:
    fix = Fix(kind="declare_dynamic", title="declare", snippet="", recipe=Recipe("declare_dynamic", (DeclareDynamic(),)))
    warning = Finding("OD801", Stage.SHAPES, Severity.WARNING, "fixed size", fixes=(fix,))
    options = DiagnoseOptions()
    assert to_try(warning, options) == []
    assert to_try(warning, options, settled=True) == [(0, fix)]
