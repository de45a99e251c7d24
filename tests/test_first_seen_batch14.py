"""General mechanisms for failures not seen before (issue 22), written before and after the
fourteenth first-seen batch (fixtures/corpus/first_seen_2026-12-05d.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_first_seen_batch11 import UNDECLARED

from onnxdoctor.analysis.classify import extract_op
from onnxdoctor.model import DiagnoseOptions, Diagnosis
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import EagerExport


def _diagnosed(tmp_path: Path, source: str, **options: bool) -> Diagnosis:
    """The diagnosis of `source` written as the model script model.py."""
    script = tmp_path / "model.py"
    script.write_text(source)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(**options))
    return diagnosis


# round() and math.sqrt() of sizes declared dynamic: both stay in the exported program as calls
# on symbolic scalars, which the dynamo exporter's registry does not translate (pytorch#138852).
SIZE_FUNCTIONS = '''
import math

import torch
import torch.nn.functional as F

dynamo = True
opset_version = 18
dynamic_shapes = ({2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC},)


class Resample(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = (round(x.shape[-2] / 1.5), int(math.sqrt(x.shape[-1])) * 4)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def get_model():
    torch.manual_seed(0)
    return Resample().eval(), (torch.rand(1, 2, 27, 36),)


def get_inputs2():
    return (torch.rand(1, 2, 33, 50),)
'''


@pytest.mark.slow
def test_a_function_of_a_symbolic_size_is_translated_and_judged_at_other_sizes(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, SIZE_FUNCTIONS, fix=True)
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "builtins::round")
    best = finding.fixes[0]
    assert best.kind == "scalar_translation" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    # Checked where the sizes differ from the example's, not at the example alone: the rounding
    # and the square root decide the output's size there.
    assert best.check is not None and len(best.check.sizes) >= 2, best.check


def test_a_torch_function_on_a_symbolic_scalar_is_named_by_the_node_s_target() -> None:
    message = ("DispatchError: No ONNX function found for <function _sym_sqrt at 0x7f00aa>. Failure message: "
               "No decompositions registered ... Error when translating node %_sym_sqrt : [num_users=1] = "
               "call_function[target=torch._sym_sqrt](args = (%sym_float,), kwargs = {})")
    assert extract_op(message) == "torch::_sym_sqrt"
    assert extract_op("No ONNX function found for <built-in function round>. Failure") == "builtins::round"


# Noise on both branches of a data-dependent `if`: PARITY matches only in distribution, and so
# must the check at other inputs, where the recorded branch is the wrong one.
NOISY_BRANCH = '''
import torch

dynamo = False
opset_version = 17


class NoisyGate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn_like(x)
        if x.mean() > 0:
            return x * 2 + noise
        return x - 3 + noise


def get_model():
    torch.manual_seed(0)
    return NoisyGate().eval(), (torch.randn(4, 8) + 0.5,)
'''


@pytest.mark.slow
def test_a_frozen_branch_under_random_outputs_is_judged_in_distribution_at_other_inputs(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, NOISY_BRANCH, fix=False, check_shapes=False)
    (frozen,) = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity.value == "error", frozen.message  # not "matches at other inputs too"
    assert "in distribution" in frozen.message


def test_a_random_aten_op_run_by_a_python_kernel_counts_as_drawing() -> None:
    import onnx
    from onnx import TensorProto, helper

    from onnxdoctor.worker.randomness import random_ops

    def bridged(overload: str, name: str) -> onnx.NodeProto:
        node = helper.make_node(f"aten_{name}_0", ["x"], [name], domain="onnxdoctor", call="{}",
                                types="float32->float32")
        # An attribute as the bridge writes it (make_node's own `overload` is the function field).
        node.attribute.append(helper.make_attribute("overload", overload))
        return node

    graph = helper.make_graph(
        [bridged("aten::_sample_dirichlet.default", "d"), bridged("aten::logcumsumexp.default", "c"),
         helper.make_node("RandomUniformLike", ["x"], ["u"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "dcu"])
    assert random_ops(helper.make_model(graph)) == ["RandomUniformLike", "aten::_sample_dirichlet"]


# A loop over experts that skips the ones no row chose: the example chose two of three, so the
# trace lost the third; other inputs choose it.
SKIPPED_WORK = '''
import torch

dynamo = False
opset_version = 17


class Experts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.experts = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = choice == index
            if not rows.any():
                continue
            out = out + expert(x) * rows.unsqueeze(-1)
        return out


def get_model():
    torch.manual_seed(0)
    return Experts().eval(), (torch.randn(5, 4), torch.tensor([0, 1, 1, 0, 1]))


def get_inputs2():
    return (torch.randn(5, 4), torch.tensor([2, 1, 2, 0, 0]))
'''


@pytest.mark.slow
def test_a_branch_that_only_skips_work_is_exported_taken_and_named_by_the_value_it_reads(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, SKIPPED_WORK, fix=True, check_shapes=False)
    (frozen,) = [f for f in diagnosis.findings if f.code == "OD210"]
    assert (frozen.op, frozen.source) == ("aten::any", "model.py:17")  # the value `if not rows.any()` reads
    best = frozen.fixes[0]
    assert best.kind == "forced_branch" and best.verified is True, [(f.kind, f.check) for f in frozen.fixes]
    assert best.recipe is not None and best.recipe.first(EagerExport) == EagerExport(
        forced_branches=(("model.py", 17, True),))
    assert best.check is not None and "get_inputs2()" in best.check.detail  # held to the other inputs


# A branch whose sides compute different things: neither reading holds for every input.
TWO_SIDES = '''
import torch

dynamo = False
opset_version = 17


class Gate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:
            return x * 2
        return x - 3


def get_model():
    torch.manual_seed(0)
    return Gate().eval(), (torch.randn(4, 8) + 0.5,)


def get_inputs2():
    return (torch.randn(4, 8) - 0.5,)
'''


@pytest.mark.slow
def test_a_branch_with_two_real_sides_is_not_called_fixed_by_reading_it_either_way(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, TWO_SIDES, fix=True, check_shapes=False)
    (frozen,) = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.op == "aten::gt" and frozen.source == "model.py:10"
    forced = [f for f in frozen.fixes if f.kind == "forced_branch"]
    assert len(forced) == 2 and not any(f.verified for f in forced), [(f.title, f.check) for f in forced]


def test_forced_branches_read_only_their_lines_and_the_tracer_still_warns_at_the_user_s_line() -> None:
    import warnings

    import torch

    from onnxdoctor.worker.fixkit import eager_export
    from onnxdoctor.worker.loader import LoadedModel

    loaded = LoadedModel(model=torch.nn.Identity(), args=(), kwargs={}, settings={}, factory="get_model")
    original = torch.Tensor.__bool__
    here = Path(__file__).name
    forced_line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                       if text.endswith("# forced: read as True without looking"))
    with eager_export(loaded, EagerExport(forced_branches=((here, forced_line, True),))):
        empty = torch.zeros(3, dtype=torch.bool)
        assert bool(empty.any()) is False  # another line: the tensor's own value

        def traced(x: torch.Tensor) -> torch.Tensor:
            if (x > 100).any():  # forced: read as True without looking
                return x * 2
            return x

        assert torch.equal(traced(torch.ones(2)), torch.full((2,), 2.0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            def branching(x: torch.Tensor) -> torch.Tensor:
                return x + 1 if x.sum() > 0 else x - 1  # not forced: the tracer warns here

            torch.jit.trace(branching, (torch.ones(2),))
    assert torch.Tensor.__bool__ is original  # restored when the export ends
    warned = [w for w in caught if "Python boolean" in str(w.message)]
    assert warned and all(Path(w.filename).name == here for w in warned), [(w.filename, w.lineno) for w in warned]


# Results handed over as numpy arrays in dicts (mmflow's forward_test), through `.data` too.
NUMPY_RESULTS = '''
import torch

dynamo = False
opset_version = 17


class Flow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(6, 2, 3, padding=1)

    def forward(self, images: torch.Tensor):
        flow = self.conv(images).permute(0, 2, 3, 1).cpu().data.numpy() * 20.0
        return [dict(flow=f) for f in list(flow)]


def get_model():
    torch.manual_seed(0)
    return Flow().eval(), (torch.randn(2, 6, 8, 8),)
'''


@pytest.mark.slow
def test_results_handed_over_as_numpy_arrays_are_exported_as_the_tensors_they_were(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, NUMPY_RESULTS, fix=True, check_shapes=False)
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and "numpy" in finding.message
    best = finding.fixes[0]
    assert best.kind == "numpy_outputs" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    # `.data` would have been the example's constant: the check at other inputs holds it to them.
    assert best.check is not None and "input sets" in best.check.detail, best.check.detail


def test_a_prims_op_is_named_by_the_aten_op_whose_decomposition_wrote_it() -> None:
    from onnxdoctor.worker.registry import aten_of_prims

    assert aten_of_prims("prims::erf_inv") == "aten::erfinv"
    assert aten_of_prims("prims::bessel_i0") == "aten::i0"
    assert aten_of_prims("prims::ndtri") == "aten::special_ndtri"
    assert aten_of_prims("prims::hypot") == "aten::hypot"
    assert aten_of_prims("prims::no_such_prim") is None
    assert aten_of_prims("aten::hypot") is None  # only prims ops are translated


HYPOT = '''
import torch

dynamo = True
opset_version = 18


class Distance(torch.nn.Module):
    def forward(self, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        return torch.hypot(dx, dy)


def get_model():
    return Distance().eval(), (torch.randn(4, 4), torch.randn(4, 4))
'''


@pytest.mark.slow
def test_the_dynamo_exporter_s_prims_op_is_reported_as_the_call_the_user_wrote(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, HYPOT, fix=True, check_shapes=False)
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op, finding.source) == ("OD202", "aten::hypot", "model.py:10")
    assert "prims::hypot" not in finding.message  # the same call is not listed again as another op
    assert finding.fixes[0].kind == "rewrite" and finding.fixes[0].verified is True


def test_a_while_loop_s_condition_is_never_read_as_true_for_ever() -> None:
    import torch

    from onnxdoctor.worker.fixkit import eager_export
    from onnxdoctor.worker.loader import LoadedModel

    loaded = LoadedModel(model=torch.nn.Identity(), args=(), kwargs={}, settings={}, factory="get_model")
    here = Path(__file__).name
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("# the loop read as True"))
    x = torch.ones(3)
    with eager_export(loaded, EagerExport(forced_branches=((here, line, True),))), pytest.raises(RuntimeError, match="never ends"):
        while (x > 100).any():  # the loop read as True
            x = x + 1


# YOLO-World's text features repeated to the image batch behind `len(x)`: the tracer records the
# example's answer, and the dynamo exporter's default capture asks Python for len(x) and fixes
# the batch (ultralytics#13048). torch.export's strict capture keeps len(x) symbolic.
LEN_OF_BATCH = '''
import torch

dynamo = False
opset_version = 17
input_names = ["images"]
dynamic_axes = {"images": {0: "batch"}}


class Guided(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("text", torch.randn(1, 5, 8))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        text = self.text
        if len(text) != len(x):
            text = text.repeat(len(x), 1, 1)
        guide = self.proj(text).view(x.shape[0], -1, 2, 4)
        return torch.einsum("bnhc,bhc->bn", guide, x.view(x.shape[0], 2, 4))


def get_model():
    torch.manual_seed(0)
    return Guided().eval(), (torch.randn(1, 8),)


def get_inputs2():
    return (torch.randn(3, 8),)
'''


@pytest.mark.slow
def test_a_size_read_with_len_is_kept_symbolic_by_torch_export_s_strict_capture(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, LEN_OF_BATCH, fix=True)
    finding = next(f for f in diagnosis.findings if f.code in ("OD802", "OD210"))
    strict = [f for f in finding.fixes if f.kind == "strict_capture"]
    assert strict and strict[0].verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "strict=True" in strict[0].snippet
    assert strict[0].check is not None and strict[0].check.sizes  # held to other batch sizes


# InternImage's DCNv3 Function: its symbolic passes an attribute with no type suffix.
UNSUFFIXED = '''
import torch

dynamo = False
opset_version = 17


class Shift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, amount: int):
        return x + amount

    @staticmethod
    def symbolic(g, x, amount):
        return g.op("custom::Shift", x, amount_i=amount, remove_center=0)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Shift.apply(x, 2) * 3


def get_model():
    return Model().eval(), (torch.randn(2, 3),)
'''


@pytest.mark.slow
def test_an_attribute_without_a_type_suffix_is_named_with_the_function_and_the_spelling_it_needs(
        tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, UNSUFFIXED, fix=False, check_shapes=False)
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD205", "Shift")  # the Function, not "::Shift"
    assert "remove_center_i=0" in finding.message and "no type suffix" in finding.message


# transformers' Deformable DETR: a Function whose compiled kernel is missing, called in try/except
# with the eager fallback in the except branch. The aborted call stays in the trace.
SWALLOWED = '''
import torch

dynamo = False
opset_version = 17
KERNEL = None  # the compiled extension did not load


class KernelFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return KERNEL.run(x)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            y = KernelFunction.apply(x)
        except Exception:
            y = x * 2
        return y + 1


def get_model():
    return Model().eval(), (torch.randn(2, 3),)
'''


@pytest.mark.slow
def test_a_function_call_aborted_inside_try_is_named_when_the_exporter_s_pass_trips_on_it(tmp_path: Path) -> None:
    finding = _diagnosed(tmp_path, SWALLOWED, fix=False, check_shapes=False).findings[0]
    assert (finding.code, finding.op) == ("OD299", "KernelFunction"), finding.message


def test_an_intermediate_value_of_another_integer_type_but_the_same_numbers_is_not_a_difference() -> None:
    import numpy as np
    import torch

    from onnxdoctor.worker.parity import compare_outputs

    positions = torch.tensor([[1, 2, 3, 0]], dtype=torch.int64)
    same = np.array([[1, 2, 3, 0]], dtype=np.int32)  # Longformer's position ids, as the export keeps them
    assert compare_outputs([positions], [same], 1e-4, 1e-3)["code"] == "OD604"  # an output: its type matters
    assert compare_outputs([positions], [same], 1e-4, 1e-3, values_only=True)["code"] is None
    other = np.array([[1, 2, 4, 0]], dtype=np.int32)
    assert compare_outputs([positions], [other], 1e-4, 1e-3, values_only=True)["code"] == "OD601"


# A matcher that hands the scores to numpy: the order it computes there is the graph's constant.
NUMPY_CALL = '''
import numpy as np
import torch

dynamo = False
opset_version = 17


class Matcher(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        order = torch.from_numpy(np.argsort(scores.detach().numpy(), axis=-1))
        return torch.gather(scores, -1, order)


def get_model():
    torch.manual_seed(0)
    return Matcher().eval(), (torch.randn(3, 5),)
'''


@pytest.mark.slow
def test_a_value_handed_to_numpy_is_named_by_the_function_that_computes_outside_torch(tmp_path: Path) -> None:
    finding = _diagnosed(tmp_path, NUMPY_CALL, fix=False, check_shapes=False).findings[0]
    assert (finding.code, finding.op, finding.source) == ("OD210", "np.argsort", "model.py:11"), finding.message


# Longformer's `is_global_attn = mask.any().item()`, asked by `if` at several lines: torch.export
# stops at the first. Read as True there, the same flag reads True at the others.
FLAG_ASKED_TWICE = '''
import torch

dynamo = True
opset_version = 18


class Clipper(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = x > 1
        flag = big.any().item()
        if flag:
            x = torch.where(big, torch.zeros_like(x), x)
        y = x * 3
        if flag:
            y = y + 0.0 * big
        return y


def get_model():
    torch.manual_seed(0)
    return Clipper().eval(), (torch.randn(4, 6),)
'''


@pytest.mark.slow
def test_a_data_dependent_flag_torch_export_stops_at_is_read_one_way_wherever_it_is_asked(tmp_path: Path) -> None:
    # Every fix tried: the TorchScript exporter holds here too (it freezes a branch that only
    # skips work), and would otherwise be the only one checked.
    finding = _diagnosed(tmp_path, FLAG_ASKED_TWICE, fix=True, all_fixes=True, check_shapes=False).findings[0]
    assert finding.code == "OD204"
    forced = [f for f in finding.fixes if f.kind == "forced_branch" and f.verified]
    assert forced, [(f.kind, f.title, f.check) for f in finding.fixes]
    step = forced[0].recipe.first(EagerExport) if forced[0].recipe else None
    assert step is not None and step.forced_branches[0][:2] == ("model.py", 12)
    assert forced[0].check is not None and "input sets" in forced[0].check.detail  # held to other inputs


# DEIMv2's deploy script: dynamo=True with the dims as dynamic_axes, which torch.onnx converts.
# Ignoring them called a healthy model's other batch sizes refused (a false alarm).
AXES_FOR_DYNAMO = UNDECLARED.replace("dynamo = False", "dynamo = True")


@pytest.mark.slow
def test_a_dynamo_script_declaring_dynamic_axes_is_exported_with_them(tmp_path: Path) -> None:
    declared = AXES_FOR_DYNAMO.replace('{"x": {0: "batch"}}', '{"x": {0: "batch"}, "y": {0: "batch", 1: "n"}}')
    diagnosis = _diagnosed(tmp_path, declared, fix=False)
    assert diagnosis.healthy, [(f.code, f.message) for f in diagnosis.findings]
    # Checked at the batch and n the script declares, where the export passes.
    assert [c.status for c in diagnosis.shapes].count("passed") >= 2, diagnosis.shapes
