"""General mechanisms for failures not seen before (issue 22), written after the eighty-third to
eighty-seventh first-seen batches (fixtures/corpus/first_seen_2026-12-07w.txt to
first_seen_2026-12-08a.txt) and the earlier batches' misses they share a cause with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from diagnosed import diagnosed, first_finding
from fix_programs import run_fix_program

from onnxdoctor.analysis.fixes.size_multiple import _SIZES_DISAGREE, ROUNDED

# A U-Net with two poolings and an upsampling that doubles: at 20x18 the second level's 9 pools
# to 4 and comes back as 8, and the skip connection's add refuses; at multiples of 4 it runs.
SMALL_UNET = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1, self.down2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.up1, self.up2 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, x):
        a = torch.relu(self.down1(x))
        b = torch.relu(self.down2(F.max_pool2d(a, 2)))
        c = F.max_pool2d(b, 2)
        b = b + F.interpolate(c, scale_factor=2.0)
        return self.up2(a + F.interpolate(torch.relu(self.up1(b)), scale_factor=2.0))


def get_model():
    torch.manual_seed(0)
    return UNet().eval(), (torch.rand(1, 3, 20, 18),)
'''

# Sizes that disagree whatever the input size: one branch always drops a column.
ALWAYS_SHORT = '''import torch
import torch.nn as nn


class Short(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + x[..., :-1]


def get_model():
    return Short().eval(), (torch.rand(1, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_network_that_divides_its_maps_is_exported_at_the_next_multiple_it_runs_at(tmp_path: Path) -> None:
    # bearpaw/pytorch-pose#124, MIC-DKFZ/nnUNet#692: the skip connection refuses an odd size.
    tried = {f.kind: f for f in first_finding(tmp_path, SMALL_UNET, "OD108").fixes}
    assert tried["size_multiple"].verified is True, tried["size_multiple"].check
    assert "20x18" in tried["size_multiple"].title


@pytest.mark.slow
def test_sizes_that_disagree_at_every_size_are_not_called_a_size_multiple(tmp_path: Path) -> None:
    tried = {f.kind: f for f in first_finding(tmp_path, ALWAYS_SHORT, "OD108").fixes}
    assert tried["size_multiple"].verified is False
    check = tried["size_multiple"].check
    assert check is not None and "not a matter of the input size" in check.detail, check


class _Counting(torch.nn.Module):
    """A model that keeps state: trying sizes must leave it as it was."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, scale: torch.Tensor, strip: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if x.shape[-1] % 8:
            raise RuntimeError("The size of tensor a (3) must match the size of tensor b (2)")
        return self.norm(x)


def test_the_rounded_example_keeps_the_values_and_leaves_the_model_as_it_was() -> None:
    model = _Counting().train()
    image, mask = torch.rand(1, 3, 6, 13), torch.ones(1, 6, 13, dtype=torch.bool)
    scope = {"model": model, "example_inputs": (image, mask),
             "example_kwargs": {"scale": torch.zeros(2, 1, 5), "strip": torch.rand(1, 2, 1, 13)}}
    exec(ROUNDED, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    (rounded, rounded_mask), keywords = scope["example_inputs"], scope["example_kwargs"]
    assert tuple(rounded.shape) == (1, 3, 8, 16) and torch.equal(rounded[..., :6, :13], image)
    assert torch.equal(rounded[..., 7, :13], image[..., 5, :])  # the edge repeated
    # The mask over the image's sizes grows with it, the new border masked out.
    assert rounded_mask.dtype == torch.bool and tuple(rounded_mask.shape) == (1, 8, 16)
    assert bool(rounded_mask[:, :6, :13].all()) and not bool(rounded_mask[:, 6:].any())
    # A placeholder of one value gets values around it; its rounded shape is what was asked for.
    assert tuple(keywords["scale"].shape) == (2, 1, 8) and float(keywords["scale"].std()) > 0.1
    assert tuple(keywords["strip"].shape) == (1, 2, 1, 16)  # an axis of 1 stays 1
    assert model.training and float(model.calls) == 0


def test_a_multiple_is_tried_only_where_sizes_disagree() -> None:
    for error in ("The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 3",
                  ("Sizes of tensors must match except in dimension 1. Expected size 16 but got size 15 for tensor "
                  "number 1 in the list."),
                  "shape '[1, 3, 7, 4, 7, 4]' is invalid for input of size 2400"):
        assert _SIZES_DISAGREE.search(error), error
    for error in ("mat1 and mat2 shapes cannot be multiplied (1x48 and 192x10)",
                  "Given groups=1, weight of size [8, 3, 3, 3], expected input[1, 4, 8, 8] to have 3 channels",
                  "index out of range in self"):
        assert not _SIZES_DISAGREE.search(error), error


# A length beside the tokens, and a loop the tracer unrolls to the example's length: at another
# length eager PyTorch runs only where `lengths` says the same (ming024/FastSpeech2#139).
LENGTH_INPUT = '''import torch
import torch.nn as nn

dynamo = False
input_names = ["tokens", "lengths"]
output_names = ["out"]
dynamic_axes = {"tokens": {1: "n"}, "out": {1: "n"}}


class Regulator(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4)

    def forward(self, tokens, lengths):
        x = self.emb(tokens)
        mask = torch.arange(x.shape[1])[None] < lengths[:, None]
        rows = [x[:, i] * (i + 1) for i in range(int(lengths[0]))]
        return torch.stack(rows, 1) * mask[..., None]


def get_model():
    torch.manual_seed(0)
    return Regulator().eval(), (torch.randint(0, 20, (1, 6)), torch.tensor([6]))
'''


def test_an_input_holding_a_length_follows_the_length_at_other_sizes(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, LENGTH_INPUT, fix=False)
    frozen = [f for f in report.findings if f.code == "OD802"]
    assert frozen and "tokens dim 1" in frozen[0].message, [(f.code, f.message) for f in report.findings]


def test_only_a_small_integer_input_holding_a_moved_size_follows_it() -> None:
    from onnxdoctor.worker.shapes import _moved_sizes, _size_valued

    moved = _moved_sizes({"tokens": [1, 10], "lengths": [1]}, {"tokens": [1, 13]})
    assert moved == {10: 13}
    assert _size_valued(torch.tensor([10]), [1], moved).tolist() == [13]
    assert _size_valued(torch.tensor(10), [], moved).tolist() == 13
    assert _size_valued(torch.tensor([10, 7]), [2], moved) is None  # not one value
    assert _size_valued(torch.tensor([10.0]), [1], moved) is None  # a float is not a length
    assert _size_valued(torch.full((1, 100), 10), [1, 100], moved) is None  # token ids, not a length
    assert _moved_sizes({"a": [4, 4]}, {"a": [5, 6]}) == {}  # one size moved two ways


# A node written only while exporting (detectron2's alias(): `_caffe2::AliasWithName`, an
# identity with a string argument, under `if torch.onnx.is_in_onnx_export()`).
EXPORT_ONLY_NODE = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 13

_LIB = torch.library.Library("odtest_alias", "FRAGMENT")
_LIB.define("Alias(Tensor input, str name) -> Tensor")
_LIB.impl("Alias", lambda x, name: x.clone(), "CompositeExplicitAutograd")


@torch.onnx.symbolic_helper.parse_args("v", "s")
def _alias(g, x, name):
    return g.op("odtest_alias::Alias", x, name_s=name).setType(x.type())


torch.onnx.register_custom_op_symbolic("odtest_alias::Alias", _alias, 1)


class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        if torch.onnx.is_in_onnx_export():
            y = torch.ops.odtest_alias.Alias(y, "features")
        return y.relu()


def get_model():
    torch.manual_seed(0)
    return Named().eval(), (torch.rand(1, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_custom_node_written_only_for_the_export_is_answered_by_the_eager_branch(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, EXPORT_ONLY_NODE, "OD401")
    assert "Alias" in (finding.op or ""), finding.message
    assert finding.fixes[0].kind == "eager_branch" and finding.fixes[0].verified is True, finding.fixes[0].check


# A torch.jit.ScriptModule subclass inside a traced model (YOLACT's FPN with use_jit on).
SCRIPTED_PART = '''from typing import List

import torch
import torch.nn as nn

dynamo = False


class Pyramid(torch.jit.ScriptModule):
    def __init__(self):
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1)])

    @torch.jit.script_method
    def forward(self, levels: List[torch.Tensor]):
        out = []
        for i, layer in enumerate(self.lateral):
            out.append(layer(levels[i]))
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.pyramid = Pyramid()

    def forward(self, x):
        x = self.stem(x)
        a, b = self.pyramid([x, x[..., ::2, ::2]])
        return a.mean() + b


def get_model():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(1, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_scripted_part_the_tracer_refuses_is_exported_with_torchscript_off(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SCRIPTED_PART, "OD299")
    assert "active trace" in finding.message, finding.message
    tried = {f.kind: f for f in finding.fixes}
    assert tried["scripting_off"].verified is True, tried["scripting_off"].check
    assert "1 scripted part " in tried["scripting_off"].title
    # fix.py turns TorchScript off before the script is imported, as the check did.
    run_fix_program(tried["scripting_off"], tmp_path / "model.py", tmp_path / "fix")


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def test_the_outermost_scripted_parts_are_counted() -> None:
    from torch.utils import mkldnn

    from onnxdoctor.worker.scripted import scripted_parts

    model = torch.nn.Sequential(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())),
                                torch.nn.Linear(2, 2))
    scripted = torch.jit.script(_plus_one)
    assert scripted_parts(model, {"helper": scripted, "other": _plus_one}) == 2
    assert scripted_parts(torch.nn.Linear(2, 2), {}) == 0
    # torch's own ScriptModule layers (torch.utils.mkldnn) are no scripting of the user's.
    dense = torch.nn.Sequential(torch.nn.Linear(2, 2)).eval()
    assert scripted_parts(mkldnn.to_mkldnn(dense), {}) == 0


# A speaker id that happens to equal the example's length: moved with the length, it would leave
# the embedding's range and eager would refuse every other size.
SPEAKER_LIKE_LENGTH = '''import torch
import torch.nn as nn

dynamo = False
input_names = ["tokens", "speaker"]
output_names = ["out"]
dynamic_axes = {"tokens": {1: "n"}, "out": {1: "n"}}


class Voice(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.speakers = nn.Embedding(20, 4), nn.Embedding(7, 4)

    def forward(self, tokens, speaker):
        return self.tokens(tokens) + self.speakers(speaker)[:, None]


def get_model():
    torch.manual_seed(0)
    return Voice().eval(), (torch.randint(0, 20, (1, 6)), torch.tensor([6]))
'''


def test_a_value_that_only_equals_a_size_is_drawn_as_before_where_moving_it_fails(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, SPEAKER_LIKE_LENGTH, fix=False)
    checked = [c for c in report.shapes if dict(c.inputs)["tokens"] != (1, 6)]
    assert checked and all(c.status == "passed" for c in checked), report.shapes


# An autograd.Function without a symbolic whose forward casts (`.int()`) beside an extension op:
# the TorchScript exporter inlines it and stops at `aten::to` (BEVDet's QuickCumsumCuda,
# tt-forge-onnx#1092).
FUNCTION_BESIDE_EXTENSION = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 13


@torch.library.custom_op("odtest_pool::pool", mutates_args=())
def pool(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x * 2 + idx.float().mean()


@pool.register_fake
def _(x, idx):
    return torch.empty_like(x)


class Pooling(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx):
        idx = idx.int()
        return torch.ops.odtest_pool.pool(x.contiguous().float(), idx)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, idx):
        return Pooling.apply(self.conv(x), idx).relu()


def get_model():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(1, 3, 8, 8), torch.tensor([1, 2, 3]))
'''


@pytest.mark.slow
def test_a_function_the_exporter_inlined_and_stopped_in_is_named(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, FUNCTION_BESIDE_EXTENSION, "OD299")
    assert (finding.op, finding.torch_op) == ("Pooling", "odtest_pool::pool"), finding.message
    assert "aten::to" in finding.message
    assert any(f.verified for f in finding.fixes), [(f.kind, f.check) for f in finding.fixes]


def test_the_node_stack_in_the_exporters_message_gives_the_users_line(tmp_path: Path) -> None:
    # "Couldn't export operator aten::size ... Defined at:" where no frame holds the node
    # (mit-han-lab/bevfusion#406: `x.shape[0]` in a Function's inlined forward).
    from onnxdoctor.worker.failures import _defined_at

    script = tmp_path / "model.py"
    script.write_text("", "utf-8")
    stack = (f"\n{torch.__file__}(625): apply\n{script}(62): forward\n"
             f"{tmp_path / 'helpers.py'}(7): pool\n{script}(79): bev_pool\n")
    assert _defined_at(stack, script) == "model.py:62"
    assert _defined_at(f"\n{torch.__file__}(625): apply\n", script) is None


# The batch read with int() into a shape: at batch 2 the graph's Reshape still holds 1, and the
# softmax runs over both samples at once (tinyvision/SOLIDER#9's window_reverse).
FROZEN_BATCH_SHAPE = '''import torch
import torch.nn as nn

dynamo = False
input_names = ["x"]
output_names = ["y"]
dynamic_axes = {"x": {0: "batch"}, "y": {0: "batch"}}


class Windows(nn.Module):
    def forward(self, x):
        b = int(x.shape[0])
        return x.reshape(b, -1).softmax(-1).reshape(x.shape)


def get_model():
    return Windows().eval(), (torch.rand(1, 4, 6),)
'''


def test_a_size_divergence_names_the_node_where_it_first_differs(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, FROZEN_BATCH_SHAPE, fix=False)
    found = [f for f in report.findings if f.code == "OD803"]
    assert found and found[0].op == "Reshape" and "first differs at Reshape node" in found[0].message, \
        [(f.code, f.op, f.message) for f in report.findings]
