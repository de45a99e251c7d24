"""Fix verification on real failing models: each fix is re-run through the whole pipeline.

A verified fix must have exported, passed the checker, loaded and run in ONNX Runtime and matched
PyTorch; a fix that cannot work (ATen fallback on ONNX Runtime CPU) must be reported as tried
and failed, with the stage it reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import onnx
import pytest
from fix_programs import run_fix_program
from typer.testing import CliRunner

from onnxdoctor.cli import app
from onnxdoctor.model import DiagnoseOptions, Diagnosis, Fix, Stage, Status
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import (
    CastAround,
    DynamicShapes,
    ExportCode,
    Recipe,
    RewriteOnnx,
    RuntimeKernels,
    SetOpset,
    UseExporter,
    UseOpset,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NEEDS_BOUNDS = "export/od208_dynamic_shapes_needs_bounds.py"


def _fixes(path: str, **options: object) -> dict[str, Fix]:
    diagnosis = diagnose(str(FIXTURES / path), DiagnoseOptions(fix=True, **options))[0]  # type: ignore[arg-type]
    assert diagnosis.findings, "the fixture should fail"
    return {fix.kind: fix for fix in diagnosis.findings[0].fixes}


# One diagnosis shared by the tests that read it (tests/conftest.py keeps them on one worker).
@pytest.fixture(scope="module")
def myselu_all_fixes() -> dict[str, Fix]:
    return _fixes("export/od203_custom_op_myselu.py", all_fixes=True)


@pytest.fixture(scope="module")
def grid_sampler_all_fixes() -> dict[str, Fix]:
    return _fixes("export/od201_grid_sampler_opset11.py", all_fixes=True)


@pytest.fixture(scope="module")
def needs_bounds_diagnosis() -> Diagnosis:
    return diagnose(str(FIXTURES / NEEDS_BOUNDS), DiagnoseOptions(fix=True))[0]


def test_custom_op_fixes_are_verified_end_to_end(myselu_all_fixes: dict[str, Fix], tmp_path: Path) -> None:
    fixes = myselu_all_fixes
    # Each verified route, as --write-fix hands it over: fix.py runs as written and matches.
    for kind in ("decompose", "custom_op_dynamo", "custom_op_torchscript"):
        run_fix_program(fixes[kind], FIXTURES / "export/od203_custom_op_myselu.py", tmp_path / kind)
    decompose = fixes["decompose"]
    assert decompose.verified is True
    assert decompose.check is not None and decompose.check.reached is Stage.PARITY
    assert decompose.check.max_abs_diff is not None and decompose.check.max_abs_diff < 1e-5
    # The custom-domain routes: the generated mapping + Python kernel prove the wiring.
    for kind in ("custom_op_dynamo", "custom_op_torchscript"):
        assert fixes[kind].verified is True, fixes[kind].check
        assert fixes[kind].check.max_abs_diff < 1e-5  # type: ignore[union-attr]
    # ATen fallback never runs on ONNX Runtime CPU: tried, failed, and honest about where.
    aten = fixes["aten_fallback"]
    assert aten.verified is False
    assert aten.check is not None and aten.check.reached is not Stage.PARITY
    assert aten.check.detail


def test_custom_op_mappings_are_typed_from_the_op_s_own_results(tmp_path: Path) -> None:
    # The op returns int64 indices from a float input: typed float, the custom node would lie.
    fixture = "export/od203_custom_op_int64_indices.py"
    fixes = _fixes(fixture, all_fixes=True)
    dynamo, torchscript = fixes["custom_op_dynamo"], fixes["custom_op_torchscript"]
    assert "def row_argmax_to_onnx(x: FLOAT) -> INT64:" in dynamo.snippet
    assert "outputs=[PyCustomOpDef.dt_int64]" in dynamo.snippet
    assert ".setType(x.type().with_dtype(torch.int64))" in torchscript.snippet
    for fix in (dynamo, torchscript):
        assert fix.verified is True, fix.check
        assert fix.check is not None and fix.check.max_abs_diff == 0
    run_fix_program(dynamo, FIXTURES / fixture, tmp_path / "dynamo")


@pytest.mark.slow
def test_onnx_ops_symbolic_in_forward_is_fixed_by_exporting_the_eager_branch() -> None:
    # torch.onnx.ops.symbolic behind is_in_onnx_export(): with it false, the eager branch is exported.
    fixes = _fixes("ort_load/od401_myselu_onnx_ops_symbolic_dynamo.py")
    assert fixes["eager_branch"].verified is True, fixes["eager_branch"].check
    native = fixes["runtime_kernel"]
    # A script's user has no model.onnx: the library goes to the script's run.
    assert "diagnose model.onnx" not in native.snippet and "custom_op_libraries = [" in native.snippet


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "routes", "kernel_calls"), [
    # mmcv style: a Function's symbolic wrote the node; its forward is plain torch.
    ("od401_function_symbolic.py", ("function_forward", "function_dynamo"), "MishFunction.apply("),
    # A float attribute the kernel must read, and an ONNX name and attribute unlike the op's, two outputs.
    ("od401_clampish_float_attr.py", ("decompose",), "limit = float(attrs['limit'])"),
    ("od401_renamed_two_outputs.py", ("decompose",), "eps = float(attrs['epsilon'])"),
    # An op with no Python body (a compiled extension's kind): the kernel calls torch.ops.extn.shrink.
    ("od401_library_op_symbolic.py", (), "torch.ops.extn.shrink(torch.from_numpy(np.asarray(x)), lambd)"),
])
def test_a_custom_node_is_fixed_from_the_code_that_wrote_it(fixture: str, routes: tuple[str, ...],
                                                            kernel_calls: str, tmp_path: Path) -> None:
    fixes = _fixes(f"ort_load/{fixture}", all_fixes=True)
    for kind in (*routes, "runtime_kernel_python"):
        assert fixes[kind].verified is True, (kind, fixes[kind].check)
    kernel = fixes["runtime_kernel_python"]
    assert kernel_calls in kernel.snippet
    assert kernel.recipe and kernel.recipe.first(UseExporter) == UseExporter("torchscript")  # the export as it was
    if "Function" in kernel.title or "MishFunction" in kernel.snippet:
        # As --write-fix hands it over: the kernel calls the Function defined in the script.
        run_fix_program(kernel, FIXTURES / "ort_load" / fixture, tmp_path / "kernel")
    assert fixes["runtime_kernel"].check is None  # the native-library advice is shown, not tried


@pytest.mark.slow
def test_a_function_whose_forward_needs_a_rewrite_is_fixed_by_a_chain() -> None:
    # A Python kernel works at once, but needs torch at run time: the kernel-free route is
    # continued (forward, then the op-rewrite library's linalg_inv) and ranked first.
    diagnosis = diagnose(str(FIXTURES / "ort_load/od401_function_forward_inverts.py"), DiagnoseOptions(fix=True))[0]
    best = diagnosis.findings[0].fixes[0]
    assert best.kind == "chain" and best.verified is True, best
    assert best.recipe is not None and best.recipe.chain[0] == "function_forward"


def test_lowest_supporting_opset_is_found_and_verified(grid_sampler_all_fixes: dict[str, Fix], tmp_path: Path) -> None:
    # With --all-fixes every route is tried; the opset route and its verdict are the same as alone.
    fixes = grid_sampler_all_fixes
    run_fix_program(fixes["opset"], FIXTURES / "export/od201_grid_sampler_opset11.py", tmp_path / "opset")
    opset = fixes["opset"]
    assert opset.recipe and opset.recipe.first(UseOpset) == UseOpset(16)  # grid_sampler's TorchScript symbolic starts at 16
    assert opset.verified is True, opset.check


def test_contrib_op_route_for_onnxruntime_is_verified(grid_sampler_all_fixes: dict[str, Fix]) -> None:
    contrib = grid_sampler_all_fixes["contrib_ops"]
    assert contrib.verified is True, contrib.check


def test_other_exporter_fixes_an_op_only_one_exporter_lacks() -> None:
    fixes = _fixes("export/od202_fft_torchscript.py")
    assert fixes["exporter"].recipe and fixes["exporter"].recipe.first(UseExporter) == UseExporter("dynamo")
    assert fixes["exporter"].verified is True, fixes["exporter"].check


def test_eval_mode_fixes_training_mode_mismatch(tmp_path: Path) -> None:
    diagnosis = diagnose(str(FIXTURES / "export/od206_training_mode.py"), DiagnoseOptions(fix=True))[0]
    first = diagnosis.findings[0]
    assert first.code == "OD601"
    eval_fix = next(f for f in first.fixes if f.kind == "eval_mode")
    assert eval_fix.verified is True, eval_fix.check
    assert eval_fix.check is not None and eval_fix.check.status is Status.PASSED
    run_fix_program(eval_fix, FIXTURES / "export/od206_training_mode.py", tmp_path / "eval")


def test_attributes_round_trip_with_their_types_and_call_values() -> None:
    fixes = _fixes("export/od203_custom_op_attrs.py", all_fixes=True)
    dynamo, torchscript = fixes["custom_op_dynamo"], fixes["custom_op_torchscript"]
    # What is verified is what the user is shown.
    assert dynamo.recipe and torchscript.recipe
    assert _step(dynamo.recipe, ExportCode).code in dynamo.snippet
    assert _step(dynamo.recipe, RuntimeKernels).python in dynamo.snippet
    assert _step(torchscript.recipe, ExportCode).code in torchscript.snippet
    # Suffixes and types from the op's schema: float -> _f / dt_float, int -> _i / dt_int64.
    assert "beta_f=beta" in torchscript.snippet and "power_i=power" in torchscript.snippet
    assert "@symbolic_helper.parse_args('v', 'f', 'i')" in torchscript.snippet
    assert "beta: float = 1.0, power: int = 1" in dynamo.snippet
    assert "'beta': PyCustomOpDef.dt_float, 'power': PyCustomOpDef.dt_int64" in dynamo.snippet
    # The call used beta=1.5, power=2: a wrong attribute would show up as a parity error.
    for fix in (dynamo, torchscript):
        assert fix.verified is True, fix.check
        assert fix.check is not None and fix.check.max_abs_diff is not None
        assert fix.check.max_abs_diff < 1e-4


@pytest.mark.parametrize("path", ["export/od203_custom_op_myselu.py"])
def test_write_fix_writes_a_model_that_loads(path: str, tmp_path: Path) -> None:
    out = tmp_path / "fix"
    result = CliRunner().invoke(app, ["diagnose", str(FIXTURES / path), "--write-fix", str(out), "--quiet"])
    assert result.exit_code == 1, result.output
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "fix.py", "model.onnx"]
    model = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}  # decomposed: standard ops only
    again = CliRunner().invoke(app, ["diagnose", str(FIXTURES / path), "--write-fix", str(out), "--quiet"])
    assert again.exit_code == 2 and "--force" in again.output


def test_onnx_file_op_missing_at_its_opset_is_expanded_or_raised_and_verified() -> None:
    diagnosis = diagnose(
        str(FIXTURES / "check/od301_gelu_opset11.onnx"), DiagnoseOptions(fix=True, all_fixes=True)
    )[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD301"
    # Expanding keeps the model's opset, so it ranks above raising it.
    assert [f.kind for f in finding.fixes] == ["expand_function", "raise_opset"]
    expand, raise_ = finding.fixes
    assert expand.verified is True and expand.check is not None and expand.check.reached is Stage.ORT_RUN
    # Compared with Gelu itself, run by ONNX Runtime at opset 20.
    assert expand.check.max_abs_diff is not None and expand.check.max_abs_diff < 1e-5
    assert "matches the original model at opset 20" in expand.check.detail
    assert raise_.recipe and _step(raise_.recipe, RewriteOnnx).transform == SetOpset(20)  # Gelu appears at 20
    assert raise_.verified is True and raise_.check is not None and raise_.check.reached is Stage.ORT_RUN


def test_expanded_file_is_written_at_its_own_opset(tmp_path: Path) -> None:
    out = tmp_path / "fix"
    result = CliRunner().invoke(
        app, ["diagnose", str(FIXTURES / "check/od301_gelu_opset11.onnx"), "--write-fix", str(out), "-q"]
    )
    assert result.exit_code == 1, result.output  # the finding stands; the fix is written beside it
    model = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert [i.version for i in model.opset_import if i.domain in ("", "ai.onnx")] == [11]
    assert "Gelu" not in {n.op_type for n in model.graph.node}
    readme = (out / "README.md").read_text()
    assert "PyTorch" not in readme and "opset 20" in readme


def test_onnx_file_opset_too_new_for_the_runtime_is_lowered_and_verified() -> None:
    diagnosis = diagnose(str(FIXTURES / "ort_load/od404_opset_29.onnx"), DiagnoseOptions(fix=True))[0]
    finding = next(f for f in diagnosis.findings if f.code == "OD404")
    fix = next(f for f in finding.fixes if f.kind == "lower_opset")
    assert fix.verified is True, fix.check


def test_data_dependent_branch_fix_is_verified_but_marked_unsafe() -> None:
    # TorchScript matches PyTorch on the example input only: the tracer froze the branch (OD210).
    # (The early return as a selection of both paths is verified first: every fix is tried here.)
    fixes = _fixes("export/od204_data_dependent_if.py", all_fixes=True)
    assert fixes["where_branch"].verified is True, fixes["where_branch"].check
    exporter = fixes["exporter"]
    assert exporter.verified is False and exporter.check is not None
    assert exporter.check.reached is Stage.PARITY and exporter.check.detail.startswith("OD210")
    assert exporter.applicability.value == "unsafe" and "torch.cond" in exporter.cost


@pytest.mark.parametrize("path", ["export/od203_custom_op_two_inputs.py", "export/od203_custom_op_two_outputs.py"])
def test_custom_domain_routes_follow_the_schema(path: str) -> None:
    """Interleaved tensor/attribute arguments and multiple outputs survive both mappings and the kernel."""
    fixes = _fixes(path, all_fixes=True)
    for kind in ("decompose", "custom_op_dynamo", "custom_op_torchscript"):
        assert fixes[kind].verified is True, (kind, fixes[kind].check)


def test_pasted_decomposition_snippet_exports_a_model_that_runs(myselu_all_fixes: dict[str, Fix], tmp_path: Path) -> None:
    """A new user pasting the best fix under their script gets a model ONNX Runtime runs."""
    import subprocess
    import sys

    fixes = myselu_all_fixes  # the snippet is the proposal's own text: --all-fixes does not change it
    snippet = fixes["decompose"].snippet.replace("'model.onnx'", repr(str(tmp_path / "fixed.onnx")))
    script = tmp_path / "user_script.py"
    script.write_text((FIXTURES / "export/od203_custom_op_myselu.py").read_text()
                      + "\n\nmodel, example_inputs = get_model()\n" + snippet)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Run it in a child: this test process must stay free of onnxruntime (import-hygiene tests).
    check = (
        "import numpy as np, onnxruntime as ort, sys\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)\n"
        "(out,) = s.run(None, {s.get_inputs()[0].name: x})\n"
        "assert out.shape == (2, 8) and np.isfinite(out).all()\n"
    )
    ran = subprocess.run([sys.executable, "-c", check, str(tmp_path / "fixed.onnx")],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_missing_kernel_type_is_fixed_by_a_verified_cast_in_a_script() -> None:
    # The rewrite is applied to the fresh export, so the cast model is compared with PyTorch (float64).
    fix = _fixes("ort_load/od402_det_float64.py")["cast"]
    assert fix.recipe and _step(fix.recipe, RewriteOnnx).transform == CastAround("Det", "float")
    assert fix.verified is True and fix.check is not None and fix.check.reached is Stage.PARITY
    assert fix.check.max_abs_diff is not None and 0 < fix.check.max_abs_diff < 1e-4  # float32 rounding


@pytest.mark.parametrize(
    ("path", "code", "kind"),
    [
        ("ort_load/od402_det_float64.onnx", "OD402", "cast"),
        ("ort_load/od403_ir_version_15.onnx", "OD403", "ir_version"),
    ],
)
def test_runtime_refusals_of_a_file_are_fixed_by_verified_rewrites(
    path: str, code: str, kind: str, tmp_path: Path
) -> None:
    diagnosis = diagnose(str(FIXTURES / path), DiagnoseOptions(fix=True))[0]
    finding = next(f for f in diagnosis.findings if f.code == code)
    fix = next(f for f in finding.fixes if f.kind == kind)
    assert fix.verified is True, fix.check
    assert fix.check is not None and fix.check.reached is Stage.ORT_RUN
    assert fix.check.artifact and Path(fix.check.artifact).suffix == ".onnx"
    run_fix_program(fix, FIXTURES / path, tmp_path / kind)


@pytest.mark.parametrize(
    ("path", "correction"),
    [
        ("export/od208_dynamic_shapes_wrong_name.py", "rename"),
        (NEEDS_BOUNDS, "suggested"),
    ],
)
def test_dynamic_shapes_corrections_are_verified(path: str, correction: str, tmp_path: Path,
                                                 needs_bounds_diagnosis: Diagnosis) -> None:
    # Asked for by name (not looked up inside) so tests/conftest.py sees the shared fixture.
    if path == NEEDS_BOUNDS:
        assert needs_bounds_diagnosis.findings, "the fixture should fail"
        fixes = {fix.kind: fix for fix in needs_bounds_diagnosis.findings[0].fixes}
    else:
        fixes = _fixes(path)
    fix = fixes["dynamic_shapes"]
    run_fix_program(fix, FIXTURES / path, tmp_path / "shapes")
    assert fix.recipe and getattr(_step(fix.recipe, DynamicShapes), correction)
    # Verified means: exported with the corrected Dims, torch.export accepts them, the model keeps
    # a symbolic dim, and matches PyTorch.
    assert fix.verified is True, fix.check
    assert fix.check is not None and fix.check.reached is Stage.PARITY
    assert "exporter" not in fixes  # TorchScript ignores dynamic_shapes: switching would not fix them


def test_needs_bounds_finding_names_the_guard_torch_drops(needs_bounds_diagnosis: Diagnosis) -> None:
    diagnosis = needs_bounds_diagnosis  # the finding's message does not depend on fixing
    [finding] = [f for f in diagnosis.findings if f.code == "OD208"]
    assert "5 <= x.shape[0]" in finding.message and "L['x']" not in finding.message


def test_specialized_dim_gets_the_way_to_keep_it_dynamic_not_torchs_constant() -> None:
    fixes = _fixes("export/od208_dynamic_shapes_specialized.py")
    fix = fixes["dynamic_shapes"]
    assert fix.recipe is None and fix.check is None  # shown, never applied: `batch = 2` is static
    assert "batch = 2" in fix.snippet and "x.shape[0]" in fix.snippet


def test_merged_equal_dims_are_a_warning_with_torchs_suggestion() -> None:
    diagnosis = diagnose(str(FIXTURES / "export/od208_dynamic_shapes_equal_dims.py"), DiagnoseOptions(fix=True))[0]
    [finding] = [f for f in diagnosis.findings if f.code == "OD208"]
    assert finding.severity.value == "warning" and "b = a" in finding.message
    assert [f.code for f in diagnosis.findings if f.severity.value == "error"] == []
    [fix] = finding.fixes
    assert fix.recipe and _step(fix.recipe, DynamicShapes).suggested == ("b = a",) and "equal" in fix.cost


def test_key_rename_pairs_only_the_keys_that_are_not_arguments() -> None:
    from onnxdoctor.analysis.classify import _DYNAMIC_SHAPES_KEYS, _shape_keys
    from onnxdoctor.analysis.fixes.dynamic_shapes import _key_rename

    text = ("top-level keys must be the arg names ['input_ids', 'attention_mask'] of `inputs`, "
            "but here they are ['attention_mask', 'ids']")
    keys = _shape_keys(_DYNAMIC_SHAPES_KEYS.search(text))  # what the classifier keeps as data
    assert keys is not None
    assert _key_rename(keys) == {"ids": "input_ids"}  # attention_mask was right and stays


def test_torchscript_custom_op_name_has_no_sentence_period() -> None:
    fixes = _fixes("export/od203_custom_op_myselu.py", exporter="torchscript", all_fixes=True)
    assert fixes["custom_op_torchscript"].verified is True, fixes["custom_op_torchscript"].check
    assert "myselu." not in fixes["custom_op_torchscript"].snippet


def test_a_rewrite_that_differs_from_its_reference_is_not_a_fix() -> None:
    from onnxdoctor.analysis.judge import _still_wrong

    numbers = {"reference": "the original model at opset 20", "reference_mismatch": "output 0 differs"}
    assert _still_wrong([], numbers)[1] == "OD601: against the original model at opset 20: output 0 differs"
    assert _still_wrong([], {"reference": "the original model at opset 20"})[1] is None


def test_several_ops_without_float64_kernels_are_fixed_by_float32_or_one_cast_of_them_all() -> None:
    fixes = _fixes("ort_load/od402_float64_several_ops.py", all_fixes=True)
    assert fixes["float32"].verified is True, fixes["float32"].check
    assert fixes["float32"].check.max_abs_diff is not None and fixes["float32"].check.max_abs_diff < 1e-5  # type: ignore[union-attr]
    # Casting around Erf alone would only move the refusal to the next op: the cast covers every
    # op without a float64 kernel, and says what float32 costs.
    cast = fixes["cast"]
    assert cast.verified is True, cast.check
    assert cast.recipe is not None and {s.transform.op for s in cast.recipe.all(RewriteOnnx)} == {"Erf", "HardSwish"}  # type: ignore[union-attr]
    assert "7 significant digits instead of float64's 16" in cast.cost


@pytest.mark.slow
def test_float64_weights_stored_beside_the_export_are_carried_into_float32() -> None:
    fixes = _fixes("ort_load/od402_float64_with_weights.py", all_fixes=True)
    assert fixes["float32"].verified is True, fixes["float32"].check  # it read the external weight
    assert fixes["cast"].verified is True and "Atan, Gelu" in fixes["cast"].title, fixes["cast"].check


def test_float32_rewrite_of_a_file_without_a_reference_is_not_verified(tmp_path: Path) -> None:
    # float32 loses x entirely in (x + 1e8) - 1e8; with more nodes than onnx's reference evaluator
    # takes, nothing can show it: such a rewrite must not be called verified.
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    double = TensorProto.DOUBLE
    nodes = [helper.make_node("Add", ["x", "big"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "big"], ["i0"], name="sub")]
    nodes += [helper.make_node("Identity", [f"i{k}"], [f"i{k + 1}"], name=f"id{k}") for k in range(2100)]
    nodes.append(helper.make_node("Erf", ["i2100"], ["y"], name="erf"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", double, [4])],
        [helper.make_tensor_value_info("y", double, [4])],
        initializer=[numpy_helper.from_array(np.array(1e8), "big")],
    )
    path = tmp_path / "cancel.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    diagnosis = diagnose(str(path), DiagnoseOptions(fix=True, all_fixes=True))[0]
    finding = next(f for f in diagnosis.findings if f.code == "OD402")
    fix = next(f for f in finding.fixes if f.kind == "float32")
    assert fix.check is not None and fix.check.reached is Stage.ORT_RUN
    assert fix.verified is False and fix.check.detail.startswith("numbers not checked")
    assert fix.check.failure == "every stage passes, numbers not checked"


S = TypeVar("S")


def _step(recipe: Recipe, cls: type[S]) -> S:
    """The recipe's step of that type; the test fails when the recipe lacks one."""
    step = recipe.first(cls)
    assert step is not None, f"{recipe.kind} has no {cls.__name__} step"
    return step


def test_a_file_with_aten_fallback_nodes_is_told_to_export_again_with_the_rewrites() -> None:
    import ast

    diagnosis = diagnose(str(FIXTURES / "ort_load/od401_aten_fallback_nodes.onnx"), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD401" and "aten::cumprod, aten::linalg_inv" in finding.message
    [fix] = finding.fixes  # no "register a kernel" advice: ATen nodes need the export redone
    assert fix.kind == "aten_fallback_off" and fix.check is None
    tree = ast.parse(fix.snippet)
    assert {"cumprod", "linalg_inv"} <= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "torch.ops.aten.cumprod.default: cumprod" in fix.snippet
