"""General mechanisms for failures not seen before (issue 22), written after the sixty-second
first-seen batch (fixtures/corpus/first_seen_2026-12-07b.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.parity import own_rounding


def _system(points: torch.Tensor) -> torch.Tensor:
    """The thin-plate-spline system of the control points: r^2 log r of their distances
    (ill-conditioned for nearby points), bordered by the affine part."""
    distance = torch.cdist(points, points).clamp_min(1e-6)
    n = points.shape[0]
    system = torch.zeros(n + 3, n + 3)
    system[:n, :n] = distance**2 * torch.log(distance)
    system[:n, n] = 1
    system[n, :n] = 1
    system[:n, n + 1:] = points
    system[n + 1:, :n] = points.T
    return system


class Warp(torch.nn.Module):
    """A thin-plate-spline solve in the manner of EleGANt#14's tps_align: the kernel of the
    control points inverted (torch.inverse) and applied to the targets."""

    def forward(self, points: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.inverse(_system(points)) @ torch.cat([targets, torch.zeros(3, 2)])


def _points(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(40, 2, generator=generator), torch.rand(40, 2, generator=generator)


def test_an_output_within_pytorch_s_own_float32_rounding_passes_and_a_wrong_one_does_not() -> None:
    points, targets = _points(0)
    model = Warp().eval()
    with torch.no_grad():
        ours = model(points, targets)
        # Another float32 algorithm for the same solve: as far from the float64 answer as torch's.
        other = torch.linalg.solve(_system(points), torch.cat([targets, torch.zeros(3, 2)]))
    found = own_rounding(model, (points, targets), {}, [ours], [other.numpy()], atol=1e-4, rtol=1e-3)
    assert found is not None and found["pytorch_error"] > 1e-4  # float32 itself is off by more than atol
    assert found["passed"], found
    wrong = ours.numpy() + 10 * found["pytorch_error"]
    assert own_rounding(model, (points, targets), {}, [ours], [wrong], atol=1e-4, rtol=1e-3)["passed"] is False


def test_a_large_output_s_rounding_does_not_excuse_an_error_in_a_small_one() -> None:
    # Judged element by element: the wide projection's float32 error allows nothing to the sigmoid.
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.wide = torch.nn.Linear(4096, 64)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.wide(x) * 10, torch.sigmoid(x[:, :8])

    model, x = Two().eval(), torch.randn(2, 4096) * 30
    with torch.no_grad():
        big, small = model(x)
    found = own_rounding(model, (x,), {}, [big, small], [big.numpy(), small.numpy() + 3e-3], atol=1e-4, rtol=1e-3)
    assert found is not None and found["passed"] is False, found
    # A bool output is no float32 rounding: no evidence, and no error either.
    assert own_rounding(model, (x,), {}, [big, small > 0.5], [big.numpy(), (small > 0.5).numpy()],
                        atol=1e-4, rtol=1e-3) is None


def test_a_model_that_refuses_float64_gives_no_evidence() -> None:
    class Fixed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ torch.ones(3, 3, dtype=torch.float32)  # float32 whatever the default

    x = torch.rand(2, 3)
    assert own_rounding(Fixed(), (x,), {}, [Fixed()(x)], [Fixed()(x).numpy()], atol=1e-4, rtol=1e-3) is None



WARP_SCRIPT = '''
import torch
dynamo = False
opset_version = 15
from warp_model import Warp

def get_model():
    generator = torch.Generator().manual_seed(0)
    return Warp().eval(), (torch.rand(40, 2, generator=generator), torch.rand(40, 2, generator=generator))

def get_inputs2():
    generator = torch.Generator().manual_seed(1)
    return (torch.rand(40, 2, generator=generator), torch.rand(40, 2, generator=generator))
'''


@pytest.mark.slow
def test_an_ill_conditioned_inverse_rewrite_is_verified_within_pytorch_s_own_rounding(tmp_path: Path) -> None:
    import inspect

    (tmp_path / "warp_model.py").write_text(f"import torch\n\n\n{inspect.getsource(_system)}\n\n{inspect.getsource(Warp)}")
    script = tmp_path / "warp.py"
    script.write_text(WARP_SCRIPT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::linalg_inv"), finding
    fix = next(f for f in finding.fixes if f.kind == "rewrite")
    assert fix.verified is True, fix.check
    assert fix.check is not None and "PyTorch's own float32 rounding" in fix.check.detail


# NVIDIA/waveglow#97's checkpoint class: forward() is a stub returning None, infer() computes the
# result (here deterministically, and ending in `.data` as WaveGlow's does).
STUB_FORWARD = '''
import torch
dynamo = False

class Vocoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.upsample = torch.nn.ConvTranspose1d(8, 8, 4, stride=2)
        self.proj = torch.nn.Conv1d(8, 2, 1)

    def forward(self, forward_input):
        return None

    def infer(self, spect, sigma=1.0):
        audio = torch.tanh(self.proj(self.upsample(spect))) * sigma
        return audio.permute(0, 2, 1).reshape(audio.size(0), -1).data

def get_model():
    torch.manual_seed(0)
    return Vocoder().eval(), (torch.randn(1, 8, 20),)
'''


@pytest.mark.slow
def test_a_stub_forward_is_named_and_the_inference_method_exported_instead(tmp_path: Path) -> None:
    script = tmp_path / "vocoder.py"
    script.write_text(STUB_FORWARD)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD499" and finding.message.startswith("forward() returns no tensor"), finding
    assert "infer()" in finding.message
    fix = next(f for f in finding.fixes if f.kind == "entry_method")
    # The wrapper exports infer(), `.data` traced as a detach; checked against PyTorch's infer().
    assert fix.verified is True and "Export the model's infer()" in fix.title, fix.check


def test_a_tensor_printed_into_an_error_is_shortened_to_its_type_and_shape() -> None:
    from onnxdoctor.worker.tracebacks import exception_text

    printed = "output 1 (Columns 1 to 3 0.35 -1.02 0.89\n\nColumns 4 to 5 1.5 2.0\n[ torch.FloatTensor{1,5} ])"
    text = exception_text(RuntimeError(printed + " of traced region did not have observable data dependence"))
    assert text == "output 1 (a FloatTensor of shape (1,5)) of traced region did not have observable data dependence"
    assert exception_text(ValueError("shape (2, 3) [ not a tensor ]")) == "shape (2, 3) [ not a tensor ]"


# pytorch/pytorch#167068's mechanism: a batch-1 example of a dim declared dynamic is specialised
# by torch.export without a word (here through a one-prompt fast path), and the graph runs batch 1
# only. Exported from the example doubled along the batch, the graph keeps it.
ONE_PROMPT = '''
import torch
dynamo = True
input_names = ["x"]
dynamic_axes = {"x": {0: "batch", 1: "seq"}}

class PromptEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.proj(x)
        if b == 1:
            h = torch.softmax(h[0], -1)[None]
        else:
            h = torch.softmax(h, -1)
        return h.reshape(b, s * 8)

def get_model():
    torch.manual_seed(0)
    return PromptEncoder().eval(), (torch.randn(1, 5, 8),)

def get_inputs2():
    return (torch.randn(3, 7, 8),)
'''


@pytest.mark.slow
def test_a_size_one_example_dim_the_export_fixed_is_exported_from_an_example_of_two(tmp_path: Path) -> None:
    script = tmp_path / "prompts.py"
    script.write_text(ONE_PROMPT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=True))
    found = {f.code: f for f in diagnosis.findings}
    assert "OD802" in found, [(f.code, f.message) for f in diagnosis.findings]
    fix = found["OD802"].fixes[0]
    # Its LoadCode changes the example: checked in a worker of its own, or the example stays 1.
    assert fix.title.startswith("Export with an example of size 2 along batch") and fix.verified is True, fix.check


def test_a_recipe_that_changes_the_model_or_example_runs_alone() -> None:
    from onnxdoctor.recipe import EvalMode, LoadCode, Recipe, UseOpset

    assert Recipe("x", (LoadCode("example_inputs = ()"),)).alone
    assert Recipe("x", (EvalMode(),)).alone
    assert not Recipe("x", (UseOpset(18),)).alone and Recipe("x", (UseOpset(18),), isolated=True).alone


# ChaoningZhang/MobileSAM#176's mechanism: torch.onnx's conversion of dynamic_axes for torch.export
# lists the dynamic_axes keys before the other input names and pairs them with forward()'s inputs
# in that order, so the dynamic dim of the second input lands on the first, whose size is fixed.
MISNAMED = '''
import torch
dynamo = True
input_names = ["embeddings", "coords"]
dynamic_axes = {"coords": {1: "num_points"}}

class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(2, 32)
        self.embed = torch.nn.Linear(32, 32)

    def forward(self, embeddings, coords):
        return self.embed(embeddings)[:, None, :] + self.proj(coords)

def get_model():
    torch.manual_seed(0)
    return Decoder().eval(), (torch.randn(1, 32), torch.randn(1, 5, 2))
'''


@pytest.mark.slow
def test_a_dim_declared_dynamic_that_tracing_found_static_is_od208_and_the_axes_exporter_is_tried(tmp_path: Path) -> None:
    script = tmp_path / "decoder.py"
    script.write_text(MISNAMED)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=True))
    finding = diagnosis.findings[0]
    assert finding.code == "OD208", (finding.code, finding.message)
    assert "static in the model as traced: embeddings dim 1 (32)" in finding.message
    # The axes written as dynamic_shapes by forward()'s own names, checked at other sizes; the
    # TorchScript exporter, which takes dynamic_axes as they are, is offered beside it.
    assert finding.fixes[0].kind == "dynamic_shapes" and finding.fixes[0].verified is True, \
        [(f.kind, f.verified) for f in finding.fixes]
    assert finding.fixes[0].check is not None and finding.fixes[0].check.sizes
    assert "exporter" in {f.kind for f in finding.fixes}


# onnxruntime-inference-examples#341 (SAM's released mask post-processing): masks cropped with
# `int()` of a size computed from an input, beside a score table built with torch.tensor from
# Python numbers (a constant that is meant to be one).
CROP = '''
import torch
dynamo = False

class Crop(torch.nn.Module):
    def forward(self, masks, size):
        weights = torch.tensor([[1.0] + [0.0] * 3])
        scaled = masks * weights.sum()
        return scaled[..., : int(size[0]), : int(size[1])]

def get_model():
    return Crop().eval(), (torch.rand(1, 1, 16, 16), torch.tensor([9.0, 12.0]))

def get_inputs2():
    return (torch.rand(1, 1, 16, 16), torch.tensor([14.0, 5.0]))
'''


@pytest.mark.slow
def test_a_slice_bounded_by_int_of_a_tensor_is_named_and_sliced_with_the_tensor(tmp_path: Path) -> None:
    script = tmp_path / "crop.py"
    script.write_text(CROP)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    # The int() conversions lost the input's value, not the constant table two lines above.
    assert finding.code == "OD210" and finding.source == "crop.py:9", (finding.code, finding.source)
    fix = finding.fixes[0]
    assert fix.kind == "traced_slice" and fix.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    assert "scaled[..., : size[0], : size[1]]" in fix.snippet
