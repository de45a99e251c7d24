"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-fourth
and later first-seen batches (fixtures/corpus/first_seen_2026-12-08s.txt onwards)."""

from __future__ import annotations

from pathlib import Path

from diagnosed import diagnosed, first_finding

from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose

# A point-cloud library's sampling as a torch.autograd.Function over a kernel the tracer cannot see
# (crossmodal-feature-mapping#13: pointnet2_ops' furthest_point_sample, here through numpy): the
# example's sampled indices are frozen into the graph, so the export matches only the example.
SAMPLING_FUNCTION = '''import numpy as np
import torch

dynamo = False
opset_version = 17


class FarthestFirst(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz, npoint):
        pts = xyz.detach().numpy()
        order = np.argsort(-pts[:, 0], kind="stable")[:npoint].astype(np.int64)
        return torch.from_numpy(order)


class Centres(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(3, 8)

    def forward(self, xyz):
        idx = FarthestFirst.apply(xyz, 4)
        return self.embed(xyz[idx])


def get_model():
    torch.manual_seed(0)
    return Centres().eval(), (torch.rand(32, 3),)
'''


def test_a_value_frozen_inside_a_function_the_tracer_inlined_gets_a_kernel_node_checked_at_other_inputs(
        tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SAMPLING_FUNCTION, "OD210")
    fix = next(f for f in finding.fixes if f.kind == "function_kernel")
    assert fix.verified, fix.check
    assert "FarthestFirst" in fix.title
    # Verified where the frozen indices differ, not at the example alone.
    assert "input sets" in fix.check.detail, fix.check.detail


# A forward() that reads its settings from a dataclass of ints passed beside the tensor
# (pytorch#147400): neither exporter takes the object as an input.
SETTINGS_INPUT = '''from dataclasses import dataclass

import torch

dynamo = False
opset_version = 17


@dataclass
class Settings:
    top_k: int
    stride: int


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(4, 1)

    def forward(self, feats, settings):
        top, idx = torch.topk(self.score(feats).squeeze(-1), settings.top_k, dim=1)
        return top * settings.stride, idx


def get_model():
    torch.manual_seed(0)
    return Head().eval(), (torch.randn(2, 10, 4), Settings(top_k=3, stride=8))
'''


def test_a_dataclass_of_settings_passed_as_an_input_is_kept_inside_the_model_as_the_examples(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SETTINGS_INPUT, "OD299")
    assert finding.stage is Stage.EXPORT  # the loader takes it: the exporter is what refuses it
    fix = next(f for f in finding.fixes if f.kind == "object_inputs")
    assert fix.verified, fix.check
    assert "Keep Settings (input 1) inside the model" in fix.title


# A module traced with example_kwarg_inputs and exported from keyword inputs alone (pytorch#100414):
# the TorchScript exporter's input count assert fires; the eager class takes the keywords.
TRACED_FROM_KEYWORDS = '''import torch

dynamo = False
opset_version = 17


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)
        self.ctx = torch.nn.Linear(6, 6)

    def forward(self, features, use_context=False, context=None):
        h = self.proj(features)
        if use_context and context is not None:
            h = h + self.ctx(context)
        return torch.tanh(h)


def get_model():
    torch.manual_seed(0)
    features, context = torch.randn(3, 6), torch.randn(3, 6)
    traced = torch.jit.trace(Head().eval(), example_kwarg_inputs={"features": features, "context": context})
    return traced, (), {"features": features, "context": context}
'''


def test_a_module_traced_from_keyword_inputs_is_exported_as_its_eager_class_called_with_them(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, TRACED_FROM_KEYWORDS, "OD299")
    fix = next(f for f in finding.fixes if f.kind == "scripted_eager" and f.verified)
    assert "example_kwargs" in fix.snippet


# Padding to a multiple of 8 computed with Python math on the traced sizes (onnx/models#691): the
# Pad's amounts are frozen (zero at the example), and the skip connection's Add is what fails.
PADDED_TO_A_MULTIPLE = '''import math

import torch
import torch.nn.functional as F

dynamo = False
opset_version = 13
input_names = ["image"]
dynamic_axes = {"image": {2: "height", 3: "width"}}


class Padded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.deeper = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def pad(self, image):
        h, w = image.shape[-2:]
        padded_h = int(math.ceil(float(h) / 8) * 8)
        padded_w = int(math.ceil(float(w) / 8) * 8)
        return F.pad(image, (0, padded_w - int(w), 0, padded_h - int(h)))

    def forward(self, image):
        skip = self.down(self.pad(image))
        return skip + F.interpolate(self.deeper(skip), scale_factor=2.0, mode="nearest")


def get_model():
    torch.manual_seed(0)
    return Padded().eval(), (torch.rand(1, 3, 32, 48),)
'''


def test_a_size_frozen_by_python_math_names_the_node_using_it_not_the_add_that_fails_later(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, PADDED_TO_A_MULTIPLE, "OD802", fix=False)
    assert (finding.op, finding.torch_op) == ("Pad", "aten::pad"), (finding.op, finding.message)
    assert "Add node" in finding.message and "read as Python numbers" in finding.message
    assert finding.source is not None and finding.source.endswith(":22")  # the F.pad line


# A model left in nn.DataParallel from training (MEAL-V2#26): the TorchScript exporter refuses the
# wrapper outright; the module it holds is the model.
DATA_PARALLEL = '''import torch

dynamo = False
opset_version = 17


def get_model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5))
    return torch.nn.DataParallel(net.eval()), (torch.randn(2, 3, 8, 8),)
'''


def test_a_model_left_in_a_training_wrapper_exports_the_module_it_holds(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(DATA_PARALLEL, "utf-8")
    # Every fix tried: the dynamo exporter, checked first in the main worker, takes the wrapper too.
    finding = diagnose(str(script), DiagnoseOptions(all_fixes=True, check_shapes=False))[0].findings[0]
    assert finding.code == "OD299", finding.message
    fix = next(f for f in finding.fixes if f.kind == "inner_module")
    assert fix.verified, fix.check
    assert "model = model.module" in fix.snippet


# The dynamo exporter asked for opset 9 (onnx#3805): ONNX's version converter has no adapter to
# bring Resize down, so the file stays at opset 18 and only a logged traceback says why.
OPSET_NINE_RESIZE = '''import torch
import torch.nn.functional as F

dynamo = True
opset_version = 9


class Upsampled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return torch.cat([F.interpolate(self.conv(x), scale_factor=2.0, mode="nearest")] * 2, dim=1)


def get_model():
    torch.manual_seed(0)
    return Upsampled().eval(), (torch.rand(1, 3, 4, 4),)
'''


def test_an_opset_the_dynamo_exporter_could_not_convert_to_names_the_op_and_gets_the_torchscript_exporter(
        tmp_path: Path) -> None:
    finding = next(f for f in diagnosed(tmp_path, OPSET_NINE_RESIZE).findings if f.code == "OD207")
    assert finding.op == "Resize" and "No Adapter" in finding.message
    fix = next(f for f in finding.fixes if f.kind == "exporter")
    assert fix.verified, fix.check


# A hand-written norm over a last dim of 1, scaled by 8 features (onnxruntime#31980): ONNX
# Runtime's SimplifiedLayerNormFusion folds the broadcasting Mul into a node that refuses it.
FUSED_NORM = '''import torch

dynamo = False
opset_version = 17


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.scale * (centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5))


def get_model():
    return Norm().eval(), (torch.randn(4, 1),)
'''


def test_a_node_onnx_runtimes_optimizer_made_that_fails_gets_that_rewrite_turned_off(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, FUSED_NORM, "OD501")
    fix = next(f for f in finding.fixes if f.kind == "ort_options")
    assert fix.verified, fix.check
    assert '"optimization.disable_specified_optimizers", "SimplifiedLayerNormFusion"' in fix.snippet


# A classifier that packs its input and keeps only the LSTM's final state (onnx#1399): the
# exporter's unpack is never used, and it takes a pack only with its unpack.
FINAL_STATE_OF_A_PACK = '''import torch
from torch.nn.utils.rnn import pack_padded_sequence

dynamo = False
opset_version = 11


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(3, 5, batch_first=True)
        self.out = torch.nn.Linear(5, 2)

    def forward(self, x, lengths):
        _, (h_n, _) = self.rnn(pack_padded_sequence(x, lengths, batch_first=True))
        return self.out(h_n[-1])


def get_model():
    torch.manual_seed(0)
    return Classifier().eval(), (torch.randn(2, 6, 3), torch.tensor([6, 4]))
'''


def test_a_pack_whose_recurrent_layer_keeps_only_its_final_state_exports_on_the_padded_batch(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, FINAL_STATE_OF_A_PACK, "OD299")
    assert finding.op == "prim::PackPadded", finding.message
    fix = next(f for f in finding.fixes if f.kind == "packed_on_padded")
    assert fix.verified, fix.check


# A network whose levels must line up (a BiFPN, onnx#4452) with H and W declared dynamic: eager
# refuses every size a pixel or a few away, and the anchors it builds in NumPy are frozen.
LEVELS_THAT_LINE_UP = '''import numpy as np
import torch
import torch.nn.functional as F

dynamo = False
opset_version = 13
input_names = ["image"]
dynamic_axes = {"image": {2: "height", 3: "width"}}


class Anchored(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.down = torch.nn.Sequential(*[torch.nn.Conv2d(3 if i == 0 else 4, 4, 3, stride=2, padding=1)
                                          for i in range(3)])
        self.deeper = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, image):
        skip = self.down(image)  # an eighth of the size: the top level lines up only at multiples of 16
        fused = skip + F.interpolate(self.deeper(skip), scale_factor=2.0, mode="nearest")
        h, w = image.shape[2:]
        anchors = torch.from_numpy(np.arange(int(h) * int(w) // 4, dtype=np.float32))
        return fused, anchors


def get_model():
    torch.manual_seed(0)
    return Anchored().eval(), (torch.rand(1, 3, 32, 64),)
'''


def test_declared_sizes_eager_refuses_a_step_away_are_checked_again_at_the_stride(tmp_path: Path) -> None:
    finding = next(f for f in diagnosed(tmp_path, LEVELS_THAT_LINE_UP, fix=False).findings if f.code == "OD803")
    assert "image=1x3x64x128" in finding.message, finding.message  # 32x64 stepped by 32 and 64


# A module that keeps its network as self.net and never defines forward() (a LightningModule),
# beside one whose forward() is there and has a bug: only the first is offered its submodule.
NO_FORWARD = '''import torch

dynamo = False


class Wrapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)
{forward}

def get_model():
    return Wrapped().eval(), (torch.randn(3, 4),)
'''


def test_a_model_with_no_forward_is_offered_the_submodule_that_takes_its_inputs_and_a_buggy_one_is_not(
        tmp_path: Path) -> None:
    missing = first_finding(tmp_path, NO_FORWARD.format(forward=""), "OD108", fix=False)
    assert [f.title for f in missing.fixes if f.kind == "inner_module"] == [
        "Export model.net, a submodule that takes the example inputs, since the model's own forward() raises"]
    buggy = NO_FORWARD.format(forward="\n    def forward(self, x):\n        return self.net(x) + x  # 2 and 4 columns\n")
    wrong = first_finding(tmp_path, buggy, "OD108", fix=False)
    assert not [f for f in wrong.fixes if f.kind == "inner_module"]
