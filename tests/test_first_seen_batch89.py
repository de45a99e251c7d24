"""General mechanisms for failures not seen before (issue 22), written after the eighty-ninth and
later first-seen batches (fixtures/corpus/first_seen_2026-12-08c.txt onwards)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
import torch
from diagnosed import first_finding

from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker import shapes
from onnxdoctor.worker.loader import LoadedModel


def test_a_size_is_checked_even_when_the_budget_is_spent_before_the_first(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loaded machine the eager probes could spend the whole SHAPES budget, and a fixed-batch
    # export (PaDiM exported at batch 1, anomalib#2338) was then called healthy: no size checked.
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.rand(1, 3, 8, 8)
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], opset_version=17)
    state = {"loaded": LoadedModel(model, (x,), {}), "session": ort.InferenceSession(str(path)),
             "onnx_model": onnx.load(str(path))}
    monkeypatch.setattr(shapes, "TIME_BUDGET", 0.0)
    facts = shapes.check_sizes(state, atol=1e-4, rtol=1e-3, explicit=(), dynamo=False)
    assert facts["probes"][:1] == [{"dims": [("x", 0)], "accepted": True}]
    assert [e["status"] for e in facts["sizes"]] == ["refused"], facts
    assert facts["stopped"]  # the budget still stops every further size


# A sparse convolution's Function whose forward calls a NumPy kernel through a helper, as
# MinkowskiEngine's does through its compiled extension (graspness_implementation#12): the tracer
# stops at the `torch.from_numpy` of the helper, a line outside the Function's forward.
NUMPY_FUNCTION = '''import numpy as np
import torch


def _kernel(x, w):
    return torch.from_numpy(np.maximum(x.detach().numpy() @ w.detach().numpy(), 0.0))


class SparseConvFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return _kernel(x.contiguous(), w)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(SparseConvFunction.apply(x, self.w))


dynamo = False
opset_version = 17


def get_model():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(5, 3),)
'''


def test_an_op_the_exporter_stops_at_in_a_helper_of_a_function_s_forward_names_the_function(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, NUMPY_FUNCTION, "OD299")
    assert (finding.op, finding.torch_op) == ("SparseConvFunction", "aten::lift_fresh"), finding.message
    assert finding.source == "model.py:6"
    kernel = next(f for f in finding.fixes if f.kind == "function_kernel")
    assert kernel.verified, kernel.check


# A 4-bit layer's Function unpacking nibbles with `&` on uint8 (optimum#1914): torch's symbolic
# for `&` at opset 14 refuses integers while the exporter tries to inline the Function, prints why
# on stderr, and then fails on another op of the forward (`aten::size`).
NIBBLE_FUNCTION = '''import torch


class Unpack4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, packed, scale):
        low = (packed & 15).float() - 8.0
        return low.reshape(packed.size(0), -1) * scale


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("packed", torch.randint(0, 255, (4, 6), dtype=torch.uint8))
        self.scale = torch.nn.Parameter(torch.tensor(0.1))

    def forward(self, x):
        return x @ Unpack4Bit.apply(self.packed, self.scale).t()


dynamo = False
opset_version = 14


def get_model():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(2, 6),)
'''


def test_a_symbolic_refusal_inside_a_function_names_its_op_and_the_opset_that_takes_it(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, NIBBLE_FUNCTION, "OD201")
    assert finding.op == "aten::bitwise_and", finding.message
    assert "Unpack4Bit" in finding.message and "opset 18" in finding.message
    assert any(f.verified for f in finding.fixes), [(f.kind, f.check) for f in finding.fixes]


# A CRF's Viterbi decoding that walks back its best path with `.item()` and returns the tags as
# Python lists (pytorch-crf#80): the tracer turns the returned numbers into constants.
ITEM_DECODE = '''import torch


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        scores = self.fc(x)
        tags = []
        for row in scores:
            best = row.argmax()
            tags.append(best.item())
        return tags


dynamo = False
opset_version = 17


def get_model():
    torch.manual_seed(0)
    return Tagger().eval(), (torch.rand(3, 4),)
'''


def test_an_output_built_from_item_numbers_names_item_and_its_line(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, ITEM_DECODE, "OD299", fix=False)
    assert (finding.op, finding.source) == ("aten::item", "model.py:14"), finding.message
    assert not [f for f in finding.fixes if f.kind.startswith("aten_kernel")]


# position_ids from an int32 mask as HF's helpers build them (pytorch#77842): the CumSum keeps
# int32 where PyTorch promotes to int64, and arithmetic and a clamp carry that type to the output.
INT32_POSITIONS = '''import torch


class Positions(torch.nn.Module):
    def forward(self, mask):
        ids = mask.cumsum(-1) * mask - 1
        return ids.clamp(min=0)


dynamo = False
opset_version = 11


def get_model():
    return Positions().eval(), (torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.int32),)
'''


def test_an_output_type_is_named_at_the_first_value_of_another_type_through_arithmetic(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, INT32_POSITIONS, "OD604", fix=False)
    assert (finding.op, finding.onnx_op, finding.source) == ("aten::cumsum", "CumSum", "model.py:6"), finding.message


# Classifier guidance (onnx#6088): the gradient of a conv classifier's log-probability of class y
# with respect to its input, taken with torch.func.vjp, with the class as F.one_hot and an input
# named `t`. make_fx must trace through the convolution's backward, the one-hot and that name.
GUIDANCE = '''import torch
import torch.nn.functional as F
from torch.func import vjp


class Guided(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.nn.SiLU(),
                                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                              torch.nn.Linear(4, 5))

    def forward(self, x, t, y):
        log_probs, pullback = vjp(lambda v: F.log_softmax(self.classifier(v), dim=-1), x)
        (grad,) = pullback(F.one_hot(y, 5).to(log_probs.dtype))
        return x - t.view(-1, 1, 1, 1) * grad


dynamo = True
input_names = ["x", "t", "y"]


def get_model():
    torch.manual_seed(0)
    return Guided().eval(), (torch.randn(2, 3, 8, 8), torch.rand(2), torch.tensor([1, 3]))
'''


def test_a_gradient_through_convolutions_and_a_one_hot_is_traced_and_exported(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, GUIDANCE, "OD204")
    traced = next(f for f in finding.fixes if f.kind == "autograd_traced")
    assert traced.verified, traced.check


# A saliency map computed in forward() (captum#1778's integrated gradients), exported with the
# batch declared dynamic: make_fx's trace must keep the batch symbolic for that declaration.
DYNAMIC_SALIENCY = '''import torch

dynamo = False
opset_version = 17
input_names = ["image"]
dynamic_axes = {"image": {0: "batch"}}


class Saliency(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))

    def forward(self, image):
        with torch.enable_grad():
            x = image.detach().requires_grad_()
            score = self.net(x)[:, 1].sum()
            (grad,) = torch.autograd.grad(score, x)
        return grad.abs().amax(dim=1)


def get_model():
    torch.manual_seed(0)
    return Saliency().eval(), (torch.rand(2, 3, 8, 8),)
'''


def test_a_gradient_in_forward_is_traced_with_the_declared_batch_kept_dynamic(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, DYNAMIC_SALIENCY, "OD299")
    traced = next(f for f in finding.fixes if f.kind == "autograd_traced")
    assert traced.verified, traced.check


# A bag-of-words classifier whose input arrives as a sparse COO tensor and is made dense in
# forward() (onnx#2676): ONNX has no sparse tensors, so the model takes the dense one.
SPARSE_INPUT = '''import torch

dynamo = False
opset_version = 17


class Bow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 3)

    def forward(self, bow):
        return self.fc(bow.to_dense())


def get_model():
    torch.manual_seed(0)
    indices = torch.tensor([[0, 0, 1, 2], [1, 7, 3, 9]])
    return Bow().eval(), (torch.sparse_coo_tensor(indices, torch.ones(4), (3, 10)),)
'''


def test_a_sparse_example_input_is_given_dense(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SPARSE_INPUT, "OD202")
    assert finding.op == "aten::to_dense"
    dense = next(f for f in finding.fixes if f.kind == "dense_sparse")
    assert dense.verified, dense.check


# A float16 encoder that adds a float32 mask to its attention scores (transformers#47050): on the
# CPU the model's own forward() refuses the example, and in float32 it runs and exports.
HALF_MASK = '''import torch

dynamo = True


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        mask = torch.zeros(x.shape[0], x.shape[1], x.shape[1])  # float32, whatever the model's type
        probs = (q @ k.transpose(-1, -2) + mask).softmax(-1)
        return probs @ v


def get_model():
    torch.manual_seed(0)
    return Attention().half().eval(), (torch.randn(1, 4, 8).half(),)
'''


def test_a_half_model_whose_own_forward_refuses_the_example_is_exported_in_float32(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, HALF_MASK, "OD108")
    fix = next(f for f in finding.fixes if f.kind == "float")
    assert fix.verified, fix.check


def test_a_function_a_graph_pass_crashed_on_names_its_extension_op() -> None:
    # InvAD's StyleGAN2 decoder (ADer#20): `_jit_pass_peephole` fails with "Argument passed to at()
    # was not in the map" on the UpFirDn2d Function, whose forward calls a compiled op.
    path = Path(__file__).resolve().parent.parent / "fixtures" / "corpus" / \
        "upfirdn2d_extension_python_op_invad_stylegan2_decoder_ader_20.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=False, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.op, finding.torch_op) == ("UpFirDn2d", "invad_ops::upfirdn2d"), finding.message


def test_a_forward_with_an_optional_argument_falls_back_to_the_trace_at_the_example_s_sizes(
        tmp_path: Path) -> None:
    # forward(image, mask=None) with one example input: the symbolic trace's generated forward
    # cannot take it, so the route keeps make_fx's trace at the example's sizes (and says so).
    source = DYNAMIC_SALIENCY.replace("def forward(self, image):", "def forward(self, image, mask=None):")
    finding = first_finding(tmp_path, source, "OD299")
    traced = next(f for f in finding.fixes if f.kind == "autograd_traced")
    assert traced.check is not None and traced.check.failed_at is not Stage.LOAD, traced.check
