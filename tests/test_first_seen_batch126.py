"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-twenty-sixth
and later first-seen batches (fixtures/corpus/first_seen_2026-12-09w.txt on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from diagnosed import first_finding
from fix_programs import run_fix_program

from onnxdoctor.onnxkit.checks import check_model
from onnxdoctor.onnxkit.transforms import TransformError, name_outputs

# An output named like a value the dynamo exporter names after its op: the embedding's Gather
# writes `embedding`, and output_names renames the Mul's result to `embedding` as well
# (pytorch#116443's binary retrieval encoder, once its view(dtype) was rewritten).
OUTPUT_NAMED_LIKE_AN_OP = '''import torch

dynamo = True
output_names = ["embedding", "score"]


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        h = self.tok(ids)
        return h * 2, h.sum(-1)


def get_model():
    torch.manual_seed(0)
    return Encoder().eval(), (torch.tensor([[1, 2, 3]]),)
'''


def test_an_output_name_the_graph_already_uses_is_given_after_the_export(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, OUTPUT_NAMED_LIKE_AN_OP, "OD306")
    assert "'embedding'" in finding.message
    fix = next(f for f in finding.fixes if f.kind == "output_names")
    assert fix.verified, fix.check
    assert "name_outputs(model, ('embedding', 'score'))" in fix.snippet
    printed = run_fix_program(fix, tmp_path / "model.py", tmp_path / "fix")
    assert "matches PyTorch" in printed
    written = onnx.load(str(tmp_path / "fix" / "fixed.onnx"))
    # The user's names on the outputs, and a graph in SSA form.
    assert [o.name for o in written.graph.output] == ["embedding", "score"]
    produced = [name for node in written.graph.node for name in node.output]
    assert len(produced) == len(set(produced))


def _two_outputs(first: str, second: str, *, passthrough: bool = False) -> onnx.ModelProto:
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    outs = [oh.make_tensor_value_info(first, onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info(second, onnx.TensorProto.FLOAT, [2])]
    nodes = [oh.make_node("Neg", ["x"], ["a"], name="neg"),
             oh.make_node("Abs", ["a"], [first], name="abs")]
    if not passthrough:
        nodes.append(oh.make_node("Relu", ["a"], [second], name="relu"))
    graph = oh.make_graph(nodes, "g", [x], outs)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _run(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"x": np.array([-1.0, 2.0], np.float32)}), strict=True))


def test_name_outputs_moves_an_internal_value_aside_and_swaps_names() -> None:
    model = _two_outputs("abs_out", "relu_out")
    before = _run(model)
    # `a` is the internal value: the first output takes its name, which it gives up.
    renamed = name_outputs(model, ("a", "abs_out"))
    assert [o.name for o in renamed.graph.output] == ["a", "abs_out"]
    assert not check_model(renamed)
    after = _run(renamed)
    np.testing.assert_array_equal(after["a"], before["abs_out"])
    np.testing.assert_array_equal(after["abs_out"], before["relu_out"])


def test_name_outputs_passes_an_input_through_an_identity_and_refuses_an_input_name() -> None:
    model = _two_outputs("y", "x", passthrough=True)
    renamed = name_outputs(model, ("y", "copy"))
    assert not check_model(renamed)
    np.testing.assert_array_equal(_run(renamed)["copy"], np.array([-1.0, 2.0], np.float32))
    with pytest.raises(TransformError, match="graph input"):
        name_outputs(_two_outputs("y", "z"), ("x", "z"))
    with pytest.raises(TransformError, match="twice"):
        name_outputs(_two_outputs("y", "z"), ("w", "w"))
    # One value returned as two outputs: each name its own, through an Identity.
    twice = _two_outputs("y", "z")
    twice.graph.output[1].name = "y"
    del twice.graph.node[-1]
    renamed = name_outputs(twice, ("first", "second"))
    assert [o.name for o in renamed.graph.output] == ["first", "second"]
    assert not check_model(renamed)
    after = _run(renamed)
    np.testing.assert_array_equal(after["first"], after["second"])


# A fixed-point solver whose `while` reads a residual (an MDEQ block, pytorch#22485): the tracer
# records the example's number of steps; the residual's `norm()` has no dims, which the TorchScript
# exporter's symbolic refuses in scripted code, so the scripted route needs the norm symbolic too.
FIXED_POINT_SOLVER = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, z, x):
        return torch.tanh(0.9 * self.lin(z) + x)


class Solver(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = Cell()
        self.tol = 1e-2

    def solve(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(x)
        residual = torch.ones(())
        steps = 0
        while steps < 50 and bool(residual > self.tol):
            nxt = self.cell(z, x)
            residual = (nxt - z).norm() / (nxt.norm() + 1e-8)
            z = nxt
            steps += 1
        return z

    def forward(self, x):
        return self.solve(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 6)
        self.solver = Solver()
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        return self.out(self.solver(self.inp(x)))


def get_model():
    torch.manual_seed(0)
    return Model().eval(), (torch.full((2, 4), 0.01),)


def get_inputs2():
    torch.manual_seed(1)
    return (3 * torch.randn(2, 4),)
'''


def test_a_loop_the_data_ends_is_kept_by_scripting_the_module_that_holds_it(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, FIXED_POINT_SOLVER, "OD210")
    fix = next(f for f in finding.fixes if f.verified)
    # The module holding the `while` scripted (its solve() exported for scripting), the rest traced,
    # and the norm without dims mapped: a chain found after the first step stopped at aten::norm.
    assert fix.steps == ("scripted_part", "rewrite"), (fix.steps, [(f.kind, f.check) for f in finding.fixes])
    assert "script_part(traced, path)" in fix.snippet and "['solver']" in fix.snippet
    assert "torch.jit.export(type(traced.get_submodule('solver')).solve)" in fix.snippet
    printed = run_fix_program(fix, tmp_path / "model.py", tmp_path / "fix")
    assert "matches PyTorch" in printed
    written = onnx.load(str(tmp_path / "fix" / "fixed.onnx"))
    assert "Loop" in {node.op_type for node in written.graph.node}


SCRIPTED_NORM = '''import torch

dynamo = False
opset_version = 17


class Normalize(torch.nn.Module):
    def forward(self, x):
        return x / (x.norm() + 1e-6) + x.norm(1)


def get_model():
    return torch.jit.script(Normalize()), (torch.randn(2, 3),)
'''


def test_a_norm_without_dims_in_scripted_code_is_mapped_over_every_element(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SCRIPTED_NORM, "OD299")
    assert finding.op == "aten::norm"
    fix = next(f for f in finding.fixes if f.verified)
    assert fix.kind == "rewrite" and "norm_every_element" in fix.snippet
    assert fix.check is not None and fix.check.max_abs_diff is not None and fix.check.max_abs_diff < 1e-5


def test_a_higher_order_op_the_registry_lacks_is_named_from_its_object() -> None:
    from onnxdoctor.analysis.classify import extract_op

    # pytorch#140849's ViT: the dynamo exporter names flex_attention by its Python object.
    text = ("torch.onnx._internal.exporter._errors.DispatchError: No ONNX function found for "
            "<torch._higher_order_ops.flex_attention.FlexAttentionHOP object at 0x7f3a2c1b5d90>. "
            "Failure message: No decompositions registered for the real-valued input")
    assert extract_op(text) == "higher_order::flex_attention"
    assert extract_op(text.replace("flex_attention.FlexAttentionHOP", "while_loop.WhileLoopOp")) == \
        "higher_order::while_loop"


# A zero-padded FFT of complex samples (an FMCW radar's angle FFT over 4 antennas into 8 bins,
# onnx#4785) and fftshift: the exporter decomposes fft(n=) into a complex constant_pad_nd and
# fftshift into a complex index_select itself, so the program torch.export captures never calls
# the padding the complex entry rewrites.
PADDED_COMPLEX_FFT = '''import torch

dynamo = True


class AngleFFT(torch.nn.Module):
    def forward(self, iq):
        cube = torch.view_as_complex(iq)
        spectrum = torch.fft.fftshift(torch.fft.fft(cube, n=8, dim=1), dim=1)
        return spectrum.abs()


def get_model():
    torch.manual_seed(0)
    return AngleFFT().eval(), (torch.randn(2, 4, 6, 2),)
'''


def test_a_complex_op_met_only_inside_a_composite_is_rewritten_over_the_default_decompositions(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, PADDED_COMPLEX_FFT, "OD202")
    assert finding.op == "aten::constant_pad_nd"
    fix = next(f for f in finding.fixes if f.verified)
    assert fix.kind == "rewrite" and "torch.ops.aten.constant_pad_nd.default}" in fix.snippet
    from onnxdoctor.rewrites import find_rewrites

    entry = next(r for r in find_rewrites("aten::constant_pad_nd") if r.family == "complex")
    assert entry.called_group("aten::constant_pad_nd") == ("aten.constant_pad_nd.default",)
    assert entry.called_group("aten::view_as_complex") == entry.targets


# An MC-dropout classifier left in train() for its sampling, given one image: its BatchNorm1d
# cannot take batch statistics of one sample and forward() refuses the example (pytorch#109577).
TRAIN_MODE_ONE_SAMPLE = '''import torch
import torch.nn as nn

dynamo = False


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))
    return model.train(), (torch.randn(1, 6),)
'''


def test_forward_refused_only_in_training_mode_gets_eval_mode(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, TRAIN_MODE_ONE_SAMPLE, "OD108")
    assert "Expected more than 1 value per channel when training" in finding.message
    fix = finding.fixes[0]
    assert fix.kind == "eval_mode" and fix.verified, fix.check
    assert "Monte Carlo" in fix.cost


NAMES_AS_STRINGS = '''import torch

dynamo = {dynamo}
input_names = "data"
output_names = "output"


def get_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval(), (torch.randn(1, 1, 8, 8),)
'''


@pytest.mark.parametrize("dynamo", [False, True])
def test_names_given_as_one_string_are_given_as_a_list(tmp_path: Path, dynamo: bool) -> None:
    # Pytorch-UNet#492: the TorchScript exporter stops in a C++ pass, the dynamo exporter reads the
    # letters of "data" as four names.
    finding = first_finding(tmp_path, NAMES_AS_STRINGS.format(dynamo=dynamo), "OD299")
    fix = finding.fixes[0]
    assert fix.kind == "name_lists" and fix.verified, (fix.kind, fix.check)
    assert "input_names = ['data']" in fix.snippet and "output_names = ['output']" in fix.snippet


# A complex input (an SRP-PHAT localiser taking a 4-microphone STFT, pytorch#86746): the dynamo
# exporter declares it as real pairs, which is how ONNX Runtime must be fed.
COMPLEX_INPUT = '''import torch

dynamo = True


class PairPower(torch.nn.Module):
    def forward(self, spec):
        cross = spec[:, torch.tensor([0, 1])] * spec[:, torch.tensor([2, 3])].conj()
        return torch.view_as_real(cross).pow(2).sum(-1)


def get_model():
    torch.manual_seed(0)
    return PairPower().eval(), (torch.randn(1, 4, 5, 3, dtype=torch.complex64),)
'''


def test_a_complex_input_is_fed_as_the_real_pairs_the_export_declares(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, COMPLEX_INPUT, "OD202")
    fix = next(f for f in finding.fixes if f.verified)
    assert fix.kind == "rewrite" and "torch.view_as_real(x)" in fix.cost
    printed = run_fix_program(fix, tmp_path / "model.py", tmp_path / "fix")
    assert "matches PyTorch" in printed
    written = onnx.load(str(tmp_path / "fix" / "fixed.onnx"))
    declared = [d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim]
    assert declared == [1, 4, 5, 3, 2]


LOOPS = '''import torch


def solve(x, tol):
    while (x.abs().max()
           > tol):
        x = x / 2
    return x


def decode(steps):
    for step in range(10):
        for inner in range(3):
            if steps[step, inner] > 0:
                return step
    return -1


def branch(x):
    if x.sum() > 0:
        return x
    return -x
'''


def test_controls_loop_knows_conditions_that_decide_a_loops_steps(tmp_path: Path) -> None:
    from onnxdoctor.worker.provenance import controls_loop

    source = tmp_path / "loops.py"
    source.write_text(LOOPS, "utf-8")
    lines = LOOPS.splitlines()
    comparison = next(n for n, text in enumerate(lines, 1) if text.strip().startswith("> tol"))
    inner_if = next(n for n, text in enumerate(lines, 1) if "if steps[step, inner]" in text)
    plain_if = next(n for n, text in enumerate(lines, 1) if "if x.sum() > 0" in text)
    # A while test spread over two lines, asked from its second; a return out of a nested loop.
    assert controls_loop(str(source), comparison)
    assert controls_loop(str(source), inner_if)
    assert not controls_loop(str(source), plain_if)


OWNERS = '''import torch


class Base(torch.nn.Module):
    @torch.no_grad()
    def solve(self, x):
        while bool(x.abs().max() > 1):
            x = x / 2
        return x


class Encoder(Base):
    def forward(self, x):
        return self.solve(x)


class Decoder(Base):
    def forward(self, x):
        return self.solve(x) + 1


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Encoder()
        self.rest = torch.nn.ModuleList([Encoder(), Decoder()])

    def forward(self, x):
        for block in [self.first, *self.rest]:
            x = block(x)
        return x
'''


def test_branch_owners_finds_every_module_holding_the_line(tmp_path: Path) -> None:
    import importlib.util

    from onnxdoctor.worker.scripted import branch_owners

    source = tmp_path / "owners.py"
    source.write_text(OWNERS, "utf-8")
    spec = importlib.util.spec_from_file_location("owners", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    line = next(n for n, text in enumerate(OWNERS.splitlines(), 1) if "while bool" in text)
    owners = branch_owners(module.Model(), [f"owners.py:{line}"], tmp_path.resolve())
    # Both subclasses, at both depths, through the decorator; the function's own class named.
    assert owners[f"owners.py:{line}"] == {"modules": ["first", "rest.0", "rest.1"], "class": "Base",
                                           "function": "solve"}
    assert branch_owners(module.Model(), [f"owners.py:{line}"], (tmp_path / "elsewhere").resolve()) == {}


# A detector returning one result object per image, its fields tensors (mmdeploy#2390's rotated
# RTMDet and its InstanceData): the objects sit inside a list, so the tensors are a level down.
RESULT_OBJECTS = '''import torch

dynamo = False


class InstanceData:
    def __init__(self, **fields):
        for key, value in fields.items():
            setattr(self, key, value)


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x):
        out = self.head(x)
        return [InstanceData(bboxes=out[i, :4], scores=out[i, 4:].sigmoid()) for i in range(x.shape[0])]


def get_model():
    torch.manual_seed(0)
    return Detector().eval(), (torch.randn(2, 4),)
'''


def test_tensors_inside_a_list_of_result_objects_are_the_outputs(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, RESULT_OBJECTS, "OD299")
    assert finding.message.startswith("forward() returns an InstanceData object"), finding.message
    fix = finding.fixes[0]
    assert fix.kind == "tensor_outputs" and fix.verified, (fix.kind, fix.check)
    printed = run_fix_program(fix, tmp_path / "model.py", tmp_path / "fix")
    assert "matches PyTorch" in printed
    written = onnx.load(str(tmp_path / "fix" / "fixed.onnx"))
    assert [o.name for o in written.graph.output] == ["output_0_bboxes", "output_0_scores", "output_1_bboxes",
                                                      "output_1_scores"]


# A Function whose forward makes its inputs contiguous, then calls a compiled extension's op
# (pytracking#126's PrRoIPool2DFunction): the TorchScript exporter inlines the forward and stops
# at aten::contiguous beside the extension op; the Function as one node with a kernel calling it.
EXTENSION_FUNCTION = '''import torch

dynamo = False
opset_version = 11

torch.library.define("od_test_ext::box_mean", "(Tensor features, Tensor boxes) -> Tensor")


@torch.library.impl("od_test_ext::box_mean", "CPU")
def _box_mean(features, boxes):
    return torch.stack([features[:, int(b[0]):int(b[1])].mean(1) for b in boxes], 1)


class BoxMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, features, boxes):
        features = features.contiguous()
        return torch.ops.od_test_ext.box_mean(features, boxes)


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, boxes):
        return BoxMean.apply(self.proj(x).transpose(1, 2), boxes)


def get_model():
    torch.manual_seed(0)
    return Head().eval(), (torch.randn(2, 6, 8), torch.tensor([[0, 3], [2, 6]]))
'''


def test_a_function_stopped_beside_an_extension_op_gets_a_node_with_a_kernel(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, EXTENSION_FUNCTION, "OD299")
    assert finding.op == "BoxMean"
    fix = next(f for f in finding.fixes if f.kind == "function_kernel")
    assert fix.verified, fix.check
    assert "the export stopped inside its forward" in fix.title


def test_the_tensors_only_wrapper_keeps_caches_and_modules_out_and_names_unique() -> None:
    import torch

    from onnxdoctor.analysis.fixes.outputs import WRAPPER

    scope: dict = {}
    exec(WRAPPER.split("model = TensorOutputs")[0], scope)  # the class as fix.py defines it
    leaves = scope["TensorOutputs"].leaves

    class Cache:
        def __init__(self) -> None:
            self.key_cache = [torch.zeros(1)]

    class Result:
        def __init__(self, **fields: object) -> None:
            self.__dict__.update(fields)

    t = torch.zeros(2)
    # A cache in a dict beside a list of tensors, and beside the logits at the top, stays out.
    assert [n for n, _ in leaves({"preds": [t, t], "cache": Cache()})] == ["preds_output_0", "preds_output_1"]
    assert [n for n, _ in leaves((t, Cache()))] == ["output_0"]
    # Per-item result objects are looked into; a module among their fields, and a cycle, add nothing.
    looped = Result(boxes=t)
    looped.kids = [looped]
    module = torch.nn.Linear(1, 1)
    module.anchors = torch.zeros(2)
    assert [n for n, _ in leaves([looped, Result(net=module)])] == ["output_0_boxes"]
    # Names that join to the same text are made unique.
    assert [n for n, _ in leaves({"a": {"b_c": t}, "a_b": {"c": t}})] == ["a_b_c", "a_b_c_2"]
