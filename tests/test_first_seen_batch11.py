"""General mechanisms for failures not seen before (issue 22), written before and after the
eleventh first-seen batch (fixtures/corpus/first_seen_2026-12-05.txt): values the TorchScript
tracer froze kept as tensors, declared dims keyed by forward()'s arguments, a NaN the dynamo
exporter's optimizer makes located and fixed by exporting without it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.analysis.fixes import chain
from onnxdoctor.model import Applicability, DiagnoseOptions, Fix
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import DeclareDynamic, EagerExport, Recipe, UseExporter, UseOpset
from onnxdoctor.worker.fixkit import declared_dynamic, eager_export, widened_for_export
from onnxdoctor.worker.loader import LoadedModel

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# The value goes out of a tensor and back: torch.tensor(<python int>) is recorded as a constant.
# (The distribution's argument check is what torch.export cannot capture: the dynamo exporter
# is no way out here.)
ROUND_TRIP = '''
import torch
from torch.distributions import Categorical

dynamo = False
opset_version = 17


class Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(6, 4)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        dist = Categorical(torch.softmax(self.head(state), dim=-1))
        action = dist.probs.argmax(dim=-1).item()
        steps = torch.arange(torch.tensor(action) + 1)
        return torch.tensor([action, action * 2]) + steps.sum()


def get_model():
    torch.manual_seed(0)
    return Policy().eval(), (torch.randn(6),)


def get_inputs2():
    torch.manual_seed(3)
    return (torch.randn(6) * 3,)
'''

# The value decides a branch: kept a tensor, `if` still asks for a bool and stays frozen.
BRANCH = '''
import torch

dynamo = False
opset_version = 17


class Gate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 0:
            return x * 2
        return x - 1


def get_model():
    return Gate().eval(), (torch.ones(5),)


def get_inputs2():
    return (-torch.ones(5),)
'''


def _frozen(tmp_path: Path, source: str) -> list:
    script = tmp_path / "model.py"
    script.write_text(source)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    return [f for f in diagnosis.findings if f.code == "OD210"]


@pytest.mark.slow
def test_a_value_taken_out_of_a_tensor_and_put_back_is_fixed_by_keeping_it_a_tensor(tmp_path: Path) -> None:
    (finding,) = _frozen(tmp_path, ROUND_TRIP)
    assert finding.op == "aten::item"
    best = finding.fixes[0]
    assert best.kind == "tensor_values" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert best.check is not None and "get_inputs2()" in best.check.detail  # judged at other inputs


@pytest.mark.slow
def test_a_branch_on_a_taken_value_is_not_called_fixed_by_keeping_it_a_tensor(tmp_path: Path) -> None:
    (finding,) = _frozen(tmp_path, BRANCH)
    kept = [f for f in finding.fixes if f.kind == "tensor_values"]
    assert kept and not kept[0].verified  # tried, and the other inputs still take the other branch


def test_kept_values_stay_in_the_traced_graph_and_everything_is_restored() -> None:
    loaded = LoadedModel(model=torch.nn.Identity(), args=(), kwargs={}, settings={}, factory="get_model")
    item, tensor = torch.Tensor.item, torch.tensor
    with eager_export(loaded, EagerExport(tensor_values=True)):
        value = torch.tensor(7.0).item()
        assert isinstance(value, torch.Tensor) and value.dim() == 0
        stacked = torch.tensor([torch.tensor(1), 2, torch.tensor(3.5)])
        assert stacked.dtype == torch.float32 and stacked.tolist() == [1.0, 2.0, 3.5]
        assert torch.tensor([[1, 2]]).tolist() == [[1, 2]]  # no tensor inside: the usual torch.tensor
        with pytest.raises(RuntimeError):
            torch.ones(3).item()  # several elements: the usual error
    assert torch.Tensor.item is item and torch.tensor is tensor
    assert torch.tensor(7.0).item() == 7.0


def test_a_fix_that_a_later_one_chooses_again_drops_out_of_the_chain() -> None:
    dynamo = Fix("exporter", "Use the dynamo exporter", recipe=Recipe("exporter", (UseExporter("dynamo"),)))
    back = Fix("exporter", "Use the torchscript exporter", recipe=Recipe("exporter", (UseExporter("torchscript"),)))
    kept = Fix("tensor_values", "Keep the value a tensor", applicability=Applicability.SAFE,
               recipe=Recipe("tensor_values", (EagerExport(tensor_values=True), UseExporter("torchscript"))))
    assert chain([dynamo, back, kept]) is kept  # both switches are undone by the last fix
    opset = Fix("opset", "Export at opset 18", recipe=Recipe("opset", (UseOpset(18), UseExporter("dynamo"))))
    both = chain([opset, kept])  # the opset stays: the later fix does not choose one
    assert both.kind == "chain" and both.recipe is not None and both.recipe.first(UseOpset) == UseOpset(18)


class _TwoArgs(torch.nn.Module):
    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return image * scale


def test_declared_dims_are_keyed_by_forward_s_arguments_and_a_size_one_dim_is_exported_doubled() -> None:
    loaded = LoadedModel(model=_TwoArgs(), args=(torch.ones(1, 3, 8), torch.ones(1)), kwargs={},
                         settings={"input_names": ["input", "s"]}, factory="get_model")
    declare = DeclareDynamic(dims=(("input", 0, "batch", 1, 64), ("input", 2, "width", 1, 512)))
    shapes = declared_dynamic(loaded, declare, True, loaded.settings)["dynamic_shapes"]
    # "input" is the ONNX name of forward()'s first argument; the other argument stays static.
    assert list(shapes) == ["image", "scale"] and shapes["scale"] is None
    assert set(shapes["image"]) == {0, 2}
    image, scale = widened_for_export(loaded, shapes)
    assert image.shape == (2, 3, 8) and scale.shape == (1,)  # only a declared dim of size 1 doubles
    exported = torch.export.export(loaded.model, (image, scale), dynamic_shapes=shapes)
    assert len(exported.range_constraints) == 2  # both dims stayed dynamic


# The dynamo exporter's optimizer drops the `+ 1e-15`: a row of zeros becomes 0 / 0 = NaN in
# ONNX Runtime where PyTorch gives zeros.
DROPPED_EPSILON = '''
import torch

dynamo = True


class Normalised(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = torch.relu(x)
        return v / (v.sum(-1, keepdim=True) + 1e-15)


def get_model():
    x = torch.rand(2, 4)
    x[0] = -x[0]
    return Normalised().eval(), (x,)
'''


@pytest.mark.slow
def test_a_nan_the_exporter_s_optimizer_makes_is_located_and_fixed_by_exporting_without_it(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(DROPPED_EPSILON)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    # The NaN first appears at the division, whose inputs agree within the tolerance.
    assert finding.code == "OD601" and finding.op == "aten::div" and finding.onnx_op == "Div"
    assert "NaN or an infinity first appears here" in finding.message
    best = finding.fixes[0]
    assert best.kind == "export_options" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "optimize=False" in best.snippet


# The script's own other inputs vary a dim nothing declared dynamic: ONNX Runtime refuses them.
UNDECLARED = '''
import torch

dynamo = False
opset_version = 17
input_names = ["x", "y"]
dynamic_axes = {"x": {0: "batch"}}


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(-1, keepdim=True) + y.mean(1, keepdim=True)


def get_model():
    return Pair().eval(), (torch.randn(2, 3), torch.randn(2, 4))


def get_inputs2():
    return (torch.randn(5, 3), torch.randn(5, 7))
'''


@pytest.mark.slow
def test_a_dim_the_script_s_other_inputs_vary_but_nothing_declared_is_declared_by_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(UNDECLARED)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD802" and not diagnosis.healthy
    # x's dim 0 is declared; both of y's dims are fixed, and both differ there.
    assert "'y' dim 0 (fixed to 2, 5 there); 'y' dim 1 (fixed to 4, 7 there)" in finding.message
    assert "'x'" not in finding.message
    best = finding.fixes[0]
    assert best.kind == "declare_dynamic" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    # The script's own declaration is kept in what the user pastes, with the new dim beside it.
    assert "'x': {0: 'batch'}" in best.snippet and "'y': {0: 'y_0', 1: 'y_1'}" in best.snippet
    script.write_text(UNDECLARED.replace('{"x": {0: "batch"}}', '{"x": {0: "batch"}, "y": {0: "batch", 1: "n"}}'))
    (declared,) = diagnose(str(script), DiagnoseOptions(fix=False, check_shapes=False))
    assert declared.healthy, [f.code for f in declared.findings]


@pytest.mark.slow
def test_an_object_constant_the_exporter_cannot_write_names_the_op_the_line_passes_it_to() -> None:
    # A seeded torch.Generator made in forward() is traced as a prim::Constant no symbolic writes.
    finding = diagnose(str(CORPUS / "randn_generator_constant_sde_noise_sampler_pytorch_136860.py"),
                       DiagnoseOptions(fix=False))[0].findings[0]
    assert finding.code == "OD299" and finding.op == "aten::randn"
    assert finding.source is not None and finding.source.endswith("_136860.py:50")  # randn(..., generator=)


@pytest.mark.slow
def test_a_class_deriving_from_script_module_is_exported_rebuilt_on_nn_module() -> None:
    # RWKV's `MyModule = torch.jit.ScriptModule` with @script_method helpers and a plain forward:
    # no exporter takes it, and building the class again scripts it again.
    finding = diagnose(str(CORPUS / "script_module_plain_forward_rwkv_jit_rwkv_lm_140.py"),
                       DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))[0].findings[0]
    best = finding.fixes[0]
    assert best.kind == "scripted_eager" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "eager_twin(RWKVRNN)()" in best.snippet and "rebuilt on nn.Module" in best.title


@pytest.mark.slow
def test_a_helper_scripted_while_tracing_is_traced_as_python_and_held_to_the_other_inputs() -> None:
    # detectron2's heatmaps_to_keypoints (@torch.jit.script_if_tracing): scripted, the exporter
    # refuses its advanced indexing; traced as Python it exports, but the per-ROI sizes it turns
    # into ints are frozen, so the check at other inputs rejects it: tried, honestly not verified.
    finding = diagnose(str(CORPUS / "heatmaps_to_keypoints_scripted_index_detectron2_5255.py"),
                       DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1, fix_budget=20.0))[0].findings[0]
    assert finding.code == "OD299" and finding.op == "aten::index"
    traced = next(f for f in finding.fixes if f.kind == "scripted_helpers")
    assert "heatmaps_to_keypoints" in traced.title and traced.verified is False
    assert traced.check is not None and traced.check.problem is not None and "OD210" in traced.check.problem


# The max-pool kernel is read from the input's size through the script's own name for the
# functional: traced, the kernel is the example's number.
FULL_MAX_POOL = '''
import torch
from torch.nn.functional import max_pool2d

dynamo = False
opset_version = 17
input_names = ["image"]
dynamic_axes = {"image": {2: "height", 3: "width"}}


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return max_pool2d(x, [int(s) for s in x.shape[2:]]).flatten(1)


def get_model():
    torch.manual_seed(0)
    return Head().eval(), (torch.rand(1, 3, 12, 10),)


def get_inputs2():
    torch.manual_seed(1)
    return (torch.rand(1, 3, 20, 16),)
'''


@pytest.mark.slow
def test_a_pool_whose_kernel_is_read_from_the_input_size_is_fixed_as_a_mean_or_amax(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(FULL_MAX_POOL)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True))
    errors = [f for f in diagnosis.findings if f.severity.value == "error"]
    assert errors and errors[0].code in ("OD210", "OD802", "OD803")
    pooled = next(f for f in errors[0].fixes if f.kind == "global_pool")
    assert pooled.verified is True and pooled.check is not None and pooled.check.sizes, pooled.check
    # GeM: an average of the p-th powers over a kernel read with int() from x.size().
    (gem,) = diagnose(str(CORPUS / "avg_pool2d_frozen_kernel_gem_pooling_pytorch_39323.py"),
                      DiagnoseOptions(fix=True, max_fix_checks=2))
    assert gem.findings[0].fixes[0].kind == "global_pool" and gem.findings[0].fixes[0].verified is True


def test_a_rewrite_of_an_in_place_call_replaces_its_functional_overload_alone(tmp_path: Path) -> None:
    # torch.export keeps `empty_like(y).uniform_()` in place; only functionalised is it
    # aten.uniform. Missing it there, the program was decomposed with torch's whole default table,
    # which turns empty_like into empty_permuted, an op the dynamo exporter has no function for.
    from onnxdoctor.analysis.fixes.rewrite import program_code
    from onnxdoctor.rewrites import find_rewrites

    class Dither(torch.nn.Module):
        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return y + torch.empty_like(y).uniform_(-0.05, 0.05)

    names = {"model": Dither().eval(), "example_inputs": (torch.randn(2, 3),), "torch": torch}
    exec(program_code(find_rewrites("aten::uniform")), names)  # noqa: S102 (the fix's own code)
    targets = {str(node.target) for node in names["program"].graph.nodes}
    assert "aten.uniform.default" not in targets and "aten.empty_permuted.default" not in targets
    torch.onnx.export(names["program"], (torch.randn(2, 3),), str(tmp_path / "dither.onnx"), dynamo=True)


@pytest.mark.slow
def test_a_wrongly_folded_weight_norm_is_named_and_fixed_by_folding_it_in_pytorch() -> None:
    # The TorchScript symbolic of aten::_weight_norm reduces a 1-D weight over every axis, and
    # constant folding stores the result: the Mul using it is right, its constant is not.
    finding = diagnose(str(CORPUS / "weight_norm_1d_reducel2_empty_axes_gain_pytorch_191749.py"),
                       DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=2))[0].findings[0]
    assert finding.code == "OD601" and finding.op == "aten::_weight_norm"
    assert "constant folding" in finding.message
    best = finding.fixes[0]
    assert best.kind == "fold_reparametrized" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "gain.gain (WeightNorm)" in best.title and "remove_weight_norm" in best.snippet


@pytest.mark.slow
def test_an_in_place_write_through_a_view_the_exporter_dropped_is_named() -> None:
    # scores.view(...).masked_fill_(mask, ...): the exporter writes the fill on the view's value,
    # which nothing reads; the Softmax after it then reads the unmasked scores.
    finding = diagnose(str(CORPUS / "masked_fill_inplace_view_alias_attention_pytorch_95050.py"),
                       DiagnoseOptions(fix=False, check_shapes=False))[0].findings[0]
    assert finding.code == "OD601" and finding.op == "aten::masked_fill"
    assert "dropped the write" in finding.message


@pytest.mark.slow
def test_a_torch_cond_the_exporter_fails_on_is_exported_as_both_branches_and_a_where() -> None:
    # A branch building a tensor with torch.tensor: the dynamo exporter fails decomposing the cond.
    finding = diagnose(str(CORPUS / "cond_branch_tensor_constant_early_exit_pytorch_180354.py"),
                       DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=2))[0].findings[0]
    assert finding.code == "OD299" and finding.op == "higher_order::cond"
    best = finding.fixes[0]
    assert best.recipe is not None and best.recipe.kind == "cond_as_where" and best.verified is True, [
        (f.kind, f.check) for f in finding.fixes]


@pytest.mark.slow
def test_an_op_fused_away_is_not_taken_for_a_dropped_write() -> None:
    # batch_norm is fused into the Conv before it (no node of its own): the Upsample after it
    # differs (opset 9's Upsample), and batch_norm is not what to blame.
    finding = diagnose(str(CORPUS / "upsample_bilinear_opset9_decoder_onnx_2535.py"),
                       DiagnoseOptions(fix=False, check_shapes=False))[0].findings[0]
    assert finding.code == "OD601" and finding.op == "aten::upsample_bilinear2d"


@pytest.mark.slow
def test_an_output_of_another_shape_names_the_first_call_whose_shape_differs() -> None:
    # PatchTST's x.unfold(dimension=-2, ...): the TorchScript export lays the patches out on other
    # axes, and the output's shape differs (OD603) from the unfold on.
    finding = diagnose(str(CORPUS / "unfold_negative_dim_patchtst_patchify_optimum_2101.py"),
                       DiagnoseOptions(fix=False, check_shapes=False))[0].findings[0]
    assert finding.code == "OD603" and finding.op == "aten::unfold"
