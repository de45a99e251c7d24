"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-sixteenth
and later first-seen batches (fixtures/corpus/first_seen_2026-12-09j.txt on)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import torch
from diagnosed import diagnosed, first_finding
from fix_programs import run_fix_program

from onnxdoctor.analysis.fixes import chainable
from onnxdoctor.branches import size_int_calls, size_int_edit
from onnxdoctor.model import Applicability, DiagnoseOptions, Fix
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter
from onnxdoctor.rewrites import find_rewrites

# A least-squares fitted gain (the lstsq the dynamo exporter cannot capture), used as a diagonal
# matrix: the TorchScript exporter, which the lstsq's call route traces with, has no symbolic for
# aten::diag_embed either, so the first call rewrite stops there and a second must nest in it
# (onnx#4416's MPN-COV: an SVD, then U diag(sqrt(S)) U^T).
LSTSQ_DIAGONAL = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17


class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.basis = nn.Parameter(torch.randn(6, 3))

    def forward(self, y):
        coef = torch.linalg.lstsq(self.basis.expand(y.shape[0], 6, 3), y.unsqueeze(-1)).solution
        return torch.diag_embed(coef.squeeze(-1)) @ self.basis.T


def get_model():
    torch.manual_seed(0)
    return Gain().eval(), (torch.randn(2, 6),)
'''


def test_a_call_rewrite_that_stops_at_a_second_op_nests_that_ops_call_rewrite(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(LSTSQ_DIAGONAL, "utf-8")
    finding = diagnose(str(script), DiagnoseOptions(all_fixes=True))[0].findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::linalg_lstsq")
    alone = next(f for f in finding.fixes if f.recipe is not None and f.recipe.kind == "rewrite_call")
    assert alone.check is not None and not alone.check.works and "aten::diag_embed" in alone.check.detail
    both = next((f for f in finding.fixes if f.steps == ("rewrite", "rewrite")), None)
    assert both is not None and both.verified is True, [(f.steps, f.kind, f.check) for f in finding.fixes]
    # Each step wraps the model its predecessor wrapped: both rewrites apply to one traced forward.
    assert both.snippet.count("CallsRewritten(earlier if") == 2
    assert "torch.linalg.lstsq" in both.title and "torch.diag_embed" in both.title
    # fix.py, run apart, nests them the same way and matches PyTorch.
    run_fix_program(both, script, tmp_path / "fix")


def _fix(kind: str, *steps: object) -> Fix:
    return Fix(kind=kind, title=kind, snippet="", applicability=Applicability.SAFE, cost="",
               recipe=Recipe(kind, tuple(steps)))


def test_only_a_wrapper_that_nests_composes_with_another_built_program() -> None:
    calls = _fix("rewrite_call", UseExporter("torchscript"), ExportCode("w = 1", program="traced_model", nests=True))
    other = _fix("rewrite_call", UseExporter("torchscript"), ExportCode("w = 2", program="traced_model", nests=True))
    program = _fix("rewrite", UseExporter("torchscript"), ExportCode("p = 3", program="program"))
    assert chainable(calls, other)
    # A captured program starts again from the model: it would drop the wrapper's rewrites.
    assert not chainable(calls, program) and not chainable(program, calls)


def test_diag_embed_rewrite_exports_with_the_torchscript_exporter_at_any_offset_and_dims(tmp_path: Path) -> None:
    import onnxruntime as ort

    (entry,) = find_rewrites("aten::diag_embed")
    scope: dict[str, Any] = {"torch": torch}
    exec(entry.source, scope)  # noqa: S102  (the library's own source, as fix.py runs it)
    stand_in = scope["diag_embed"]

    class Embeds(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return stand_in(x), stand_in(x, 1, 0, 2), stand_in(x, -2, -1, 0), stand_in(x.unsqueeze(0), 0, 1, 3)

    x = torch.tensor([[1.0, float("inf"), float("nan")], [-float("inf"), 0.0, 2.0]])
    path = tmp_path / "embeds.onnx"
    torch.onnx.export(Embeds(), (x,), str(path), dynamo=False, opset_version=17)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    expected = (torch.diag_embed(x), torch.diag_embed(x, 1, 0, 2), torch.diag_embed(x, -2, -1, 0),
                torch.diag_embed(x.unsqueeze(0), 0, 1, 3))
    for out, want in zip(got, expected, strict=True):
        # Exact: each entry is the input's value (inf and NaN too) or zero, never 0 * inf.
        assert torch.equal(torch.from_numpy(out).nan_to_num(7.0), want.nan_to_num(7.0)), (out, want)


# A lane detector whose forward() reads the image from a batch dict (lanedet#36), and a
# detectron2-style one reading a list of one dict per image; the example gives the tensor itself.
BATCH_DICT = '''import torch
import torch.nn as nn

dynamo = False


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, batch):
        {read}
        return self.head(self.backbone(x).mean((2, 3)) + prior)


def get_model():
    torch.manual_seed(0)
    return Detector().eval(), (torch.rand(2, 3, 8, 8), torch.rand(2, 4))
'''


def test_forward_reading_named_tensors_from_a_dict_gets_them_passed_as_one(tmp_path: Path) -> None:
    read = "x, prior = batch['img'], batch['prior']"
    finding = first_finding(tmp_path, BATCH_DICT.format(read=read), "OD108")
    fix = next(f for f in finding.fixes if f.kind == "dict_inputs")
    assert fix.verified is True and "one dict ('img', 'prior')" in fix.title, fix.title
    # Which tensor goes with which key follows the order forward() reads them: the user checks.
    assert fix.applicability is Applicability.UNSAFE
    # The exported model takes the same tensors, in the order forward() read them.
    assert "def forward(self, img, prior):" in fix.snippet


def test_forward_reading_a_list_of_dicts_gets_the_tensors_as_one_dict_in_a_list(tmp_path: Path) -> None:
    read = "x = torch.stack([item['image'] for item in batch]).squeeze(0); prior = batch[0]['prior']"
    finding = first_finding(tmp_path, BATCH_DICT.format(read=read), "OD108")
    fix = next(f for f in finding.fixes if f.kind == "dict_inputs")
    assert fix.verified is True and "a list of one dict ('image', 'prior')" in fix.title, fix.title


def test_a_forward_that_raises_for_its_own_bug_gets_no_dict_or_method(tmp_path: Path) -> None:
    # forward() reads one key, but two tensors are given: no dict answers it, and no inference method.
    read = "x = batch['img']; prior = x.sum()"
    finding = first_finding(tmp_path, BATCH_DICT.format(read=read), "OD108", fix=False)
    assert not [f for f in finding.fixes if f.kind in ("dict_inputs", "entry_method")], finding.fixes


# forward() is the training step that unpacks targets from a dict; inference() takes the image
# (Text-Recognition-on-Cross-Domain-Datasets#6). infer_batch() is named like one but raises, and
# forward_features() is a part of forward(), not the model's inference path.
TRAINING_FORWARD = '''import torch
import torch.nn as nn
import torch.nn.functional as F

dynamo = False


class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d((1, 6)))
        self.classify = nn.Linear(8, 5)

    def forward(self, input_dict):
        x, targets = input_dict['images'], input_dict['targets']
        logits = self.classify(self.forward_features(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def forward_features(self, x):
        return self.encode(x).flatten(2).transpose(1, 2)

    def infer_batch(self, x):
        raise RuntimeError("batched inference needs a tokenizer")

    def inferrence(self, x):
        return F.log_softmax(self.classify(self.encode(x).flatten(2).transpose(1, 2)), -1)


def get_model():
    torch.manual_seed(0)
    return Recognizer().eval(), (torch.rand(2, 3, 8, 24),)
'''


def test_a_forward_that_raises_at_the_example_gets_the_inference_method_that_runs(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, TRAINING_FORWARD, "OD108")
    methods = [f for f in finding.fixes if f.kind == "entry_method"]
    assert [f.title.split("'s ")[1].split("(")[0] for f in methods] == ["inferrence"], [f.title for f in methods]
    assert methods[0].verified is True and "which raises with the example inputs" in methods[0].title


# doctr#1966's window merge: the windows' count per image as int() of a size quotient, traced as
# the example's number; the windows are reshaped with it, so another batch fails or mixes images.
WINDOW_MERGE = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17
input_names = ["image"]
dynamic_axes = {"image": {0: "batch"}}


class WindowMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, img):
        b, c, h, w = img.shape
        windows = img.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 3, 5, 1).reshape(-1, 4, c)
        windows = self.proj(windows.transpose(1, 2)).transpose(1, 2)
        per_image = int(windows.shape[0] / (h * w / 2 / 2))
        merged = windows.reshape(per_image, h // 2, w // 2, 2, 2, -1)
        return merged.permute(0, 5, 1, 3, 2, 4).reshape(-1, c, h, w)


def get_model():
    torch.manual_seed(0)
    return WindowMix().eval(), (torch.rand(2, 3, 4, 6),)


def get_inputs2():
    return (torch.rand(4, 3, 4, 6),)
'''


def test_a_size_int_took_out_of_traced_sizes_is_kept_a_tensor_and_verified_at_other_batches(tmp_path: Path) -> None:
    finding = diagnosed(tmp_path, WINDOW_MERGE).findings[0]
    assert finding.code in ("OD802", "OD803", "OD210"), finding.code
    fix = next(f for f in finding.fixes if f.kind == "traced_size_int")
    assert fix.verified is True and fix.check is not None and fix.check.sizes, fix.check
    # The user's edit keeps the number in eager code and a traced size under the tracer.
    assert "per_image = torch.as_tensor(windows.shape[0] / (h * w / 2 / 2), dtype=torch.float64).long()" in fix.snippet


def test_size_ints_are_assignments_and_size_arguments_not_slices_or_loop_counts() -> None:
    source = (
        "def f(x, n):\n"
        "    k = int(x.shape[0] / 2); y = x.view(int(n), -1)[:int(n)]\n"
        "    for _ in range(int(n)):\n"
        "        pass\n"
    )
    tree = ast.parse(source)
    sized = size_int_calls(tree, 2)
    assert [ast.unparse(c) for c in sized] == ["int(x.shape[0] / 2)", "int(n)"]
    # The slice bound's int() is slice_int_calls'; range()'s count stays a Python int.
    assert sized[1].col_offset < source.splitlines()[1].index("[:")
    assert size_int_calls(tree, 3) == []
    assert size_int_edit(source, 3) is None
    _line, edited = size_int_edit(source, 2)  # type: ignore[misc]
    assert edited == ("    k = torch.as_tensor(x.shape[0] / 2, dtype=torch.float64).long(); "
                      "y = x.view(torch.as_tensor(n, dtype=torch.float64).long(), -1)[:int(n)]"), edited
    # float64 as Python computes it: float32 would round 90 * 0.7 (62.99...) up to 63.
    assert int(torch.as_tensor(90 * 0.7, dtype=torch.float64).long()) == int(90 * 0.7) == 62


# SuperPoint's simple_nms (hloc#391): max_pool2d of the (B, H, W) score map, unbatched to torch,
# written by the TorchScript exporter as a 2-D MaxPool on a rank-3 input.
UNBATCHED_POOL = '''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import avg_pool1d

dynamo = False
opset_version = 16


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = nn.Conv2d(3, 1, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, image):
        scores = self.score(image)[:, 0]  # (B, H, W)
        peaks = F.max_pool2d(scores, kernel_size=5, stride=1, padding=2)
        # A module and a name imported from torch before: both pooled as a batch of one too.
        smooth = avg_pool1d(self.pool(scores)[0], 3, stride=1, padding=1)
        return scores * (scores == peaks) + smooth


def get_model():
    torch.manual_seed(0)
    return Detector().eval(), (torch.rand(2, 3, 16, 16),)
'''


def test_an_unbatched_pool_is_pooled_as_a_batch_of_one_for_the_tracer(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(UNBATCHED_POOL, "utf-8")
    finding = diagnose(str(script), DiagnoseOptions(all_fixes=True))[0].findings[0]
    assert (finding.code, finding.op) == ("OD304", "MaxPool"), (finding.code, finding.op, finding.message)
    fix = next(f for f in finding.fixes if f.kind == "unbatched_pools")
    assert fix.verified is True and fix.check is not None and fix.check.max_abs_diff is not None
    assert fix.check.max_abs_diff < 1e-5 and "model.py:18" in fix.title, fix.title


# A traced network saved and loaded back (torch.jit.load: no Python source behind it) in an
# nn.Sequential with an eager projection (dinohash-perceptual-hash#4): the tracer refuses to enter it.
LOADED_IN_SEQUENTIAL = '''import io

import torch
import torch.nn as nn

dynamo = False


def _loaded():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.trace(net, torch.rand(1, 3, 8, 8)), buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(_loaded(), nn.Linear(4, 2)).eval(), (torch.rand(2, 3, 8, 8),)
'''


def test_a_loaded_scripted_part_the_tracer_refuses_gets_the_whole_model_scripted(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, LOADED_IN_SEQUENTIAL, "OD299")
    assert "not part of the active trace" in finding.message
    fix = next(f for f in finding.fixes if f.kind == "scripted_whole")
    assert fix.verified is True, fix.check


# A binary-code head reading float32 bits as int32 (pytorch#116443): the TorchScript tracer's alias
# analysis has no op for Tensor.view(dtype) and says so without naming the overload.
VIEW_DTYPE_TRACED = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17


class Codes(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x):
        emb = self.proj(x)
        bits = (emb.view(torch.int32) & -2147483648) | 1065353216
        return bits.view(torch.float32), emb


def get_model():
    torch.manual_seed(0)
    return Codes().eval(), (torch.randn(2, 8),)
'''


def test_the_tracers_dtype_view_assert_gets_the_bit_cast_rewrite(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, VIEW_DTYPE_TRACED, "OD299")
    assert finding.op == "aten::view"
    fix = next(f for f in finding.fixes if f.kind == "rewrite")
    assert fix.verified is True and fix.check is not None and fix.check.max_abs_diff is not None
    assert fix.check.max_abs_diff < 1e-6


def test_a_shape_view_the_tracer_refuses_is_not_taken_for_a_dtype_view() -> None:
    (entry,) = [r for r in find_rewrites("aten::view") if r.op == "aten::view.dtype"]
    shape_view = ("We don't have an op for aten::view but it isn't a special case.  Argument types: Tensor, "
                  "int[], ")
    dtype_view = "We don't have an op for aten::view but it isn't a special case.  Argument types: Tensor, int, "
    assert re.search(entry.when, dtype_view) and not re.search(entry.when, shape_view)


# An inpainting UNet whose first conv takes latents, mask and masked image (9 channels), given a
# 4-channel latent by the export script (Stable-Diffusion-WebUI-TensorRT#210).
NINE_CHANNEL_UNET = '''import torch
import torch.nn as nn

dynamo = False


class InpaintUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(9, 8, 3, padding=1)
        self.time = nn.Linear(1, 8)
        self.conv_out = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, sample, timestep):
        h = self.conv_in(sample) + self.time(timestep[:, None])[:, :, None, None]
        return self.conv_out(torch.relu(h))


def get_model():
    torch.manual_seed(0)
    return InpaintUNet().eval(), (torch.randn(2, 4, 8, 8), torch.tensor([1.0, 2.0]))
'''


def test_an_example_with_fewer_channels_than_the_conv_takes_gets_them(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, NINE_CHANNEL_UNET, "OD108")
    fix = next(f for f in finding.fixes if f.kind == "example_channels")
    assert fix.verified is True and "the 9 channels" in fix.title and "it has 4" in fix.title, fix.title


def test_a_channel_error_about_an_intermediate_value_changes_no_example(tmp_path: Path) -> None:
    # The conv that refuses is fed by another layer: no example tensor has its input's shape.
    source = NINE_CHANNEL_UNET.replace("self.conv_in(sample)", "self.conv_in(torch.cat([sample, sample], 1))")
    source = source.replace("torch.randn(2, 4, 8, 8)", "torch.randn(2, 3, 8, 8)")
    finding = first_finding(tmp_path, source, "OD108", fix=False)
    assert "to have 9 channels, but got 6" in finding.message
    assert not [f for f in finding.fixes if f.kind == "example_channels"]


def test_a_size_int_in_a_module_level_function_is_kept_a_tensor_too(tmp_path: Path) -> None:
    # ESPnet's make_pad_mask is a module-level function (espnet_onnx#95): its owner is the script's
    # globals, a dict, which the compile-again route must key by identity.
    source = WINDOW_MERGE.replace(
        "class WindowMix(nn.Module):",
        "def per_image_count(windows, h, w):\n    return int(windows.shape[0] / (h * w / 2 / 2))\n\n\nclass WindowMix(nn.Module):",
    ).replace("per_image = int(windows.shape[0] / (h * w / 2 / 2))", "per_image = per_image_count(windows, h, w)")
    finding = diagnosed(tmp_path, source).findings[0]
    fix = next(f for f in finding.fixes if f.kind == "traced_size_int")
    assert fix.verified is True, fix.check
    assert "return torch.as_tensor(windows.shape[0] / (h * w / 2 / 2), dtype=torch.float64).long()" in fix.snippet
