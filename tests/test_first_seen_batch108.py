"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-eighth
and later first-seen batches (fixtures/corpus/first_seen_2026-12-08y.txt onwards)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from diagnosed import first_finding

from onnxdoctor.analysis.fixes.size_multiple import _SIZES_DISAGREE, ROUNDED

# A temporal-shift recognizer (mmaction2#2161): frames arrive as (N, T, C, H, W), are flattened to
# (N * T, C, H, W) and viewed back as (-1, num_segments, ...); an example of one frame is not a
# clip of num_segments frames, and the view refuses.
TEMPORAL_SHIFT = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17


class ShiftNet(nn.Module):
    def __init__(self, num_segments=4):
        super().__init__()
        self.num_segments = num_segments
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, clip):
        frames = clip.reshape((-1,) + clip.shape[2:])
        x = self.conv(frames)
        n, c, h, w = x.shape
        x = x.view(-1, self.num_segments, c, h * w)
        x = torch.cat([x[:, 1:, : c // 2], x[:, :1, : c // 2]], 1).sum(-1).mean(1)
        return self.fc(x)


def get_model():
    torch.manual_seed(0)
    return ShiftNet().eval(), (torch.rand(1, 1, 3, 12, 12),)
'''

# A searched DARTS network (quark0/darts#147): forward reads drop_path_prob, which the training
# loop writes every epoch and the constructor never sets.
DARTS_DROP_PATH = '''import torch
import torch.nn as nn

dynamo = False


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = nn.Sequential(nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))

    def forward(self, x, drop_prob):
        y = self.op(x)
        if self.training and drop_prob > 0:
            y = y * torch.bernoulli(torch.full((x.size(0), 1, 1, 1), 1 - drop_prob)) / (1 - drop_prob)
        return x + y


class NetworkCIFAR(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.cells = nn.ModuleList(Cell() for _ in range(2))
        self.classifier = nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        for cell in self.cells:
            x = cell(x, self.drop_path_prob)
        return self.classifier(x.mean((2, 3)))


def get_model():
    torch.manual_seed(0)
    return NetworkCIFAR().eval(), (torch.rand(2, 3, 16, 16),)
'''

# Adaptive pooling written with avg_pool2d for export (ultralytics#16391): kernel and stride read
# from the feature map's size, which the TorchScript exporter refuses once the size is dynamic.
SIZED_AVG_POOL = '''import torch
import torch.nn as nn
import torch.nn.functional as F

dynamo = False
opset_version = 17
input_names = ["images"]
dynamic_axes = {"images": {0: "batch", 2: "height", 3: "width"}}


class PooledKeys(nn.Module):
    def __init__(self, c=8, pool=4):
        super().__init__()
        self.pool_size = pool
        self.conv = nn.Conv2d(3, c, 1)
        self.kv = nn.Conv2d(c, c, 1)

    def pool(self, x):
        h, w = x.shape[2], x.shape[3]
        sh, sw = h // self.pool_size, w // self.pool_size
        return F.avg_pool2d(x, kernel_size=(h - (self.pool_size - 1) * sh, w - (self.pool_size - 1) * sw),
                            stride=(sh, sw))

    def forward(self, images):
        x = self.conv(images)
        keys = self.kv(self.pool(x)).flatten(2)  # B, C, pool*pool
        attn = torch.softmax(x.flatten(2).transpose(1, 2) @ keys, -1)
        return attn @ keys.transpose(1, 2)


def get_model():
    torch.manual_seed(0)
    return PooledKeys().eval(), (torch.rand(2, 3, 64, 48),)
'''

# A size read as a Python int after a stride-16 pooling, with height and width declared dynamic:
# sizes a few pixels from the square example pool to the same 4x4, and only a size moved by the
# stride, with height and width apart, reaches the frozen Reshape.
DEEP_FROZEN_SIZE = '''import torch
import torch.nn as nn
import torch.nn.functional as F

dynamo = False
opset_version = 17
input_names = ["x"]
dynamic_axes = {"x": {2: "height", 3: "width"}}


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = F.avg_pool2d(self.conv(x), 16)
        h, w = int(y.shape[2]), int(y.shape[3])
        return y.reshape(y.shape[0], 4, h * w).softmax(-1).reshape(y.shape[0], 4, h, w)


def get_model():
    torch.manual_seed(0)
    return Head().eval(), (torch.rand(1, 3, 64, 64),)
'''

# The same frozen size behind an export that fails first (aten::unflatten has no symbolic before
# opset 13, mmdeploy#1970): the opset fix exports, matches at the example, and fails at the sizes
# declared dynamic, which its check now tries.
FROZEN_BEHIND_OPSET = DEEP_FROZEN_SIZE.replace("opset_version = 17", "opset_version = 11").replace(
    "y = F.avg_pool2d(self.conv(x), 16)", "y = F.avg_pool2d(self.conv(x), 16).flatten(1).unflatten(1, (4, -1))\n"
    "        y = y.reshape(y.shape[0], 4, x.shape[2] // 16, x.shape[3] // 16)")


@pytest.mark.slow
def test_an_example_of_one_frame_is_exported_as_a_clip_of_the_segments_the_network_views(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, TEMPORAL_SHIFT, "OD108")
    tried = {f.kind: f for f in finding.fixes}
    assert tried["size_multiple"].verified is True, tried["size_multiple"].check


def test_a_clips_frame_axis_is_rounded_only_after_the_spatial_sizes_failed() -> None:
    calls: list[tuple[int, ...]] = []

    class Clip(torch.nn.Module):
        def forward(self, clip: torch.Tensor) -> torch.Tensor:
            calls.append(tuple(clip.shape))
            return clip.view(-1, 4, *clip.shape[2:]).mean(1)

    clip = torch.rand(1, 1, 3, 6, 6)
    scope = {"model": Clip(), "example_inputs": (clip,)}
    exec(ROUNDED, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    (rounded,), _ = scope["example_inputs"], scope["example_kwargs"]
    assert tuple(rounded.shape) == (1, 4, 3, 6, 6)
    assert all(torch.equal(rounded[:, i], clip[:, 0]) for i in range(4))  # the last frame repeated
    assert calls[0][1] == 1 and (1, 4, 3, 6, 6) in calls  # spatial multiples first, each refused


def test_a_models_own_check_on_two_sizes_reads_as_sizes_that_disagree() -> None:
    assert _SIZES_DISAGREE.search("ValueError: h1_shape[3] must be greater than h2_shape[3]")
    assert not _SIZES_DISAGREE.search("ValueError: num_classes must be greater than 0")


@pytest.mark.slow
def test_a_drop_probability_the_training_loop_sets_is_set_to_zero(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, DARTS_DROP_PATH, "OD108")
    best = finding.fixes[0]
    assert best.kind == "unset_attributes" and best.verified is True, best.check
    assert "NetworkCIFAR.drop_path_prob" in best.title


def test_an_attribute_of_another_name_is_not_guessed() -> None:
    from onnxdoctor.analysis.fixes import unset_attributes
    from onnxdoctor.analysis.fixes._context import FixContext
    from onnxdoctor.model import Finding, Severity, Stage

    for attribute, proposed in (("drop_path_prob", True), ("num_classes", False), ("temperature", False),
                                ("survival_prob", False)):  # "keep all" is 1.0, not 0.0
        finding = Finding("OD108", Stage.LOAD, Severity.ERROR,
                          f"forward() raised AttributeError with the example inputs: 'Net' object has no "
                          f"attribute '{attribute}'")
        ctx = FixContext.build(finding, {})
        assert bool(unset_attributes.propose(finding, ctx)) is proposed, attribute


@pytest.mark.slow
def test_an_avg_pool_with_a_window_read_from_the_size_is_summed_and_holds_at_other_sizes(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SIZED_AVG_POOL, "OD299")
    assert finding.op == "aten::avg_pool2d"
    best = finding.fixes[0]
    assert best.kind == "sized_pooling" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    # Checked at the sizes declared dynamic, where the example's baked window would differ.
    assert best.check is not None and len(best.check.sizes) >= 3, best.check


def test_the_skewed_set_moves_one_inputs_dims_apart_and_separate_inputs_together() -> None:
    from onnxdoctor.worker.shapes import _skewed

    square = [([("x", 2)], None, None, 1), ([("x", 3)], None, None, 1)]
    assert _skewed(square, {"x": [1, 3, 64, 64]}) == [{"x": [1, 3, 128, 192]}]
    # A bound the move would pass leaves that dim where it was.
    bounded = [([("x", 2)], None, 100, 1), ([("x", 3)], None, None, 1)]
    assert _skewed(bounded, {"x": [1, 3, 64, 64]}) == [{"x": [1, 3, 64, 192]}]
    # A volume moved apart would grow 7.5 times: each dim moves by one stride instead.
    cube = [([("v", d)], None, None, 1) for d in (2, 3, 4)]
    assert _skewed(cube, {"v": [1, 1, 128, 128, 128]}) == [{"v": [1, 1, 192, 192, 192]}]
    # The batch moving with them is no reason to give up the set (mmdeploy#1970's 1x3x64x64 pair).
    pair = [([("a", 0), ("b", 0)], None, None, 1), ([("a", 2), ("b", 2)], None, None, 1),
            ([("a", 3), ("b", 3)], None, None, 1)]
    assert _skewed(pair, {"a": [1, 3, 64, 64], "b": [1, 3, 64, 64]}) == [
        {"a": [2, 3, 128, 192], "b": [2, 3, 128, 192]}]
    paired = [([("x", 1)], None, None, 1), ([("mask", 1)], None, None, 1)]
    assert _skewed(paired, {"x": [2, 7], "mask": [2, 7]}) == [{"x": [2, 8], "mask": [2, 8]}]


@pytest.mark.slow
def test_a_size_frozen_deep_in_a_strided_network_is_found_at_sizes_moved_by_the_stride(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, DEEP_FROZEN_SIZE, "OD802", fix=False)
    assert finding.op == "Reshape", finding


@pytest.mark.slow
def test_a_fix_for_an_export_failure_is_checked_at_the_sizes_declared_dynamic(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, FROZEN_BEHIND_OPSET, "OD201")
    opset = next(f for f in finding.fixes if f.kind == "opset")
    assert opset.verified is False and opset.check is not None, opset.check
    assert opset.check.detail.startswith("OD802"), opset.check.detail


CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "op", "node"), [
    # The graph check's node spec: 'In Node, ("/layer/Gelu", Gelu, "com.microsoft", -1) : ...
    # Error Unrecognized attribute: approximate for operator Gelu'.
    ("gelu_approximate_attr_contrib_symbolic_bert_ffn_onnxruntime_13279.py", "com.microsoft::Gelu", "/layer/Gelu"),
    # A Python op's kernel that could not read its attribute names the attribute alone.
    ("pyop_int_attr_padding_length_gpt2_greedy_ids_onnxruntime_extensions_74.py", "ai.onnx.contrib::PadIds", "/PadIds"),
])
def test_a_runtime_refusal_naming_a_node_spec_or_an_attribute_names_the_op(script: str, op: str, node: str) -> None:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import diagnose

    finding = diagnose(str(CORPUS / script), DiagnoseOptions(fix=False))[0].findings[0]
    assert (finding.code, finding.op, finding.node) == ("OD499", op, node), finding
