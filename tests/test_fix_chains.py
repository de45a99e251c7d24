"""Fix chains: a fix that gets further but stops at a new finding is continued with that finding's fixes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxdoctor.analysis.fixes import chain, chainable
from onnxdoctor.analysis.fixes.fake_kernel import fake_kernel_code
from onnxdoctor.model import Applicability, Fix
from onnxdoctor.recipe import (
    CastAround,
    EagerExport,
    EvalMode,
    ExportCode,
    Recipe,
    RewriteOnnx,
    UseExporter,
    UseOpset,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "chains" / "od402_det_float64_training.py"
# The CLI as a user runs it, from another folder: the checkout must be importable from there.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

CAST = Fix("cast", "Run Det in float", snippet="cast_around(...)\n", applicability=Applicability.UNSAFE,
           cost="precision", recipe=Recipe("cast", (RewriteOnnx(CastAround("Det", "float")), UseExporter("dynamo"))))
EVAL = Fix("eval_mode", "Call model.eval()", snippet="model.eval()\n", applicability=Applicability.SAFE,
           recipe=Recipe("eval_mode", (EvalMode(), UseExporter("dynamo")), isolated=True))
OPSET = Fix("opset", "Export at opset 18", snippet="opset_version=18\n", applicability=Applicability.SAFE,
            recipe=Recipe("opset", (UseOpset(18), UseExporter("torchscript"))))


def _program_fix(kind: str) -> Fix:
    return Fix(kind, f"{kind} rewrite", recipe=Recipe(kind, (ExportCode("program = ...\n", program="program"),)))


def test_a_chain_shows_its_steps_in_the_order_a_user_applies_them() -> None:
    fix = chain([CAST, EVAL])
    # Found cast first, but model.eval() happens before the export and the cast after it.
    assert fix.snippet.index("Step 1 of 2: Call model.eval()") < fix.snippet.index("Step 2 of 2: Run Det in float")
    assert fix.title == "Call model.eval(); then Run Det in float"
    assert fix.applicability is Applicability.UNSAFE  # the least safe step decides
    assert fix.recipe is not None and fix.recipe.chain == ("cast", "eval_mode")
    assert fix.recipe.first(CastAround) is None  # a transform is inside RewriteOnnx, not a step
    assert fix.recipe.first(RewriteOnnx) and fix.recipe.first(EvalMode) == EvalMode()


def test_a_chain_lists_its_steps_kinds_in_the_order_found_and_in_json() -> None:
    from onnxdoctor.render.jsonout import fix_dict

    fix = chain([CAST, EVAL])
    assert fix.steps == ("cast", "eval_mode")  # found order, not the shown order
    assert chain([fix, OPSET]).steps == ("cast", "eval_mode", "opset")  # a chain of a chain: flat
    assert fix_dict(fix)["steps"] == ["cast", "eval_mode"] and fix_dict(OPSET)["steps"] == []


def test_a_later_fix_s_exporter_wins_in_the_chain() -> None:
    fix = chain([CAST, OPSET])
    assert fix.recipe is not None and fix.recipe.all(UseExporter) == [UseExporter("torchscript")]


def test_a_step_is_taken_once_and_two_program_builders_do_not_chain() -> None:
    assert chainable(CAST, EVAL)
    assert not chainable(chain([CAST, EVAL]), EVAL)  # nothing new: the chain already has model.eval()
    other_cast = Fix("cast", "Run Erf in float", recipe=Recipe("cast", (RewriteOnnx(CastAround("Erf", "float")),
                                                                      UseExporter("dynamo"))))
    assert chainable(CAST, other_cast)  # the same family for a second op is a new step
    assert not chainable(_program_fix("rewrite"), _program_fix("decompose"))  # the second re-exports the model
    assert chainable(_program_fix("rewrite"), EVAL)
    assert not chainable(CAST, Fix("x", "shown only"))  # a fix without a recipe is never tried


def test_two_export_changes_chain_as_one_merged_step() -> None:
    sites = Fix("traced_length", "len() as shape[0]",
                recipe=Recipe("traced_length", (EagerExport(len_sites=(("m.py", 3),)), UseExporter("torchscript"))))
    values = Fix("tensor_values", "keep .item() a tensor",
                 recipe=Recipe("tensor_values", (EagerExport(tensor_values=True, len_sites=(("m.py", 3),)),)))
    fix = chain([sites, values])
    assert fix.recipe is not None
    # The worker applies one EagerExport per export: both fixes' changes are in it, each site once.
    assert fix.recipe.all(EagerExport) == [EagerExport(tensor_values=True, len_sites=(("m.py", 3),))]
    assert not chainable(fix, values)  # its changes are in the merged step already
    assert chainable(fix, Fix("pools", "pools", recipe=Recipe("pools", (EagerExport(global_pools=True),))))


def _diagnose(*args: str, cwd: Path, fixture: Path = FIXTURE) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "onnxdoctor", "diagnose", str(fixture), "--json", *args],
                          capture_output=True, text=True, timeout=900, cwd=cwd, env=ENV, check=False)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_a_two_step_failure_gets_a_verified_chain_and_write_fix_writes_both_steps(tmp_path: Path) -> None:
    code, report = _diagnose("--write-fix", str(tmp_path / "fix"), cwd=tmp_path)
    assert code == 1  # the model as given still fails: the fix is a proposal
    first = report["findings"][0]
    assert first["code"] == "OD402" and first["op"] == "Det"
    fixes = {f["kind"]: f for f in first["fixes"]}
    # Each step alone was tried and is not enough ...
    assert fixes["cast"]["verified"] is False and fixes["cast"]["failed_at"] == "parity"  # dropout is on
    assert fixes["exporter"]["verified"] is False
    # ... and the chain of both reaches parity, ranked first.
    assert first["fixes"][0]["kind"] == "chain" and first["fixes"][0]["verified"] is True
    assert first["fixes"][0]["max_abs_diff"] < 1e-4
    written = (tmp_path / "fix" / "fix.py").read_text()
    assert "Step 1 of 2: Call model.eval()" in written and "Step 2 of 2: Run Det in float" in written
    # fix.py runs as written, from another folder: builds the model, applies both steps, checks.
    ran = subprocess.run([sys.executable, str(tmp_path / "fix" / "fix.py"), str(tmp_path / "again.onnx")],
                         capture_output=True, text=True, timeout=600, cwd="/", env=ENV, check=False)
    assert ran.returncode == 0 and "matches PyTorch" in ran.stdout, ran.stderr[-2000:]
    # The fixed model onnxdoctor verified is written beside it, and ONNX Runtime runs it.
    run = ("import numpy as np, onnxruntime as ort, sys\n"
           "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
           "out = s.run(None, {s.get_inputs()[0].name: np.random.rand(3, 4, 4)})[0]\n"
           "assert out.shape == (3,) and np.isfinite(out).all()\n")
    ran = subprocess.run([sys.executable, "-c", run, str(tmp_path / "fix" / "model.onnx")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]


@pytest.mark.slow
def test_two_frozen_values_are_fixed_by_both_export_changes_in_one_trace(tmp_path: Path) -> None:
    # len(x) and .item() each freeze a value: either change alone leaves the other frozen.
    _, report = _diagnose(cwd=tmp_path, fixture=ROOT / "fixtures" / "chains" / "frozen_len_and_item_two_edits.py")
    found = {f["code"]: f for f in report["findings"]}
    assert {"traced_length", "tensor_values"} <= {f["kind"] for f in found["OD210"]["fixes"] if f["verified"] is False}
    chained = [f for f in found["OD803"]["fixes"] if f["kind"] == "chain"]
    assert chained and chained[0]["verified"] is True and chained[0]["max_abs_diff"] < 1e-4
    assert sorted(chained[0]["steps"]) == ["tensor_values", "traced_length"]


@pytest.mark.slow
def test_no_chain_is_started_once_the_fix_budget_is_spent(tmp_path: Path) -> None:
    code, report = _diagnose("--fix-budget", "0", cwd=tmp_path)
    assert code == 1
    kinds = [f["kind"] for f in report["findings"][0]["fixes"]]
    assert "chain" not in kinds


def test_a_negative_fix_budget_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "onnxdoctor", "diagnose", str(FIXTURE), "--fix-budget", "-1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env=ENV, check=False)
    assert done.returncode == 2 and "--fix-budget" in done.stderr and "Traceback" not in done.stderr


def test_a_generated_fake_kernel_follows_the_observed_shapes() -> None:
    same = [{"args": [{"shape": [2, 8], "dtype": "float32"}, 0.5], "results": [{"shape": [2, 8], "dtype": "float32"}]}]
    code = fake_kernel_code("myext::scaled_tanh", ["x", "scale"], same)
    assert code is not None and "@torch.library.register_fake('myext::scaled_tanh')" in code
    assert "def _scaled_tanh_fake(x, scale):" in code and "return torch.empty_like(x)" in code
    indices = [{"args": [{"shape": [3, 5], "dtype": "float32"}], "results": [{"shape": [3, 5], "dtype": "int64"}]}]
    assert "torch.empty_like(x, dtype=torch.int64)" in (fake_kernel_code("ns::argsort", ["x"], indices) or "")
    reduced = [{"args": [{"shape": [3, 5], "dtype": "float32"}], "results": [{"shape": [3], "dtype": "float32"}]}]
    fixed = fake_kernel_code("ns::rowsum", ["x"], reduced) or ""
    assert "x.new_empty([3], dtype=torch.float32)" in fixed and "fixed shape" in fixed
    # Two calls whose results follow the arguments differently: no single rule, no snippet.
    mixed = [*same, {"args": [{"shape": [4], "dtype": "float32"}, 0.5], "results": [{"shape": [2], "dtype": "float32"}]}]
    assert fake_kernel_code("myext::scaled_tanh", ["x", "scale"], mixed) is None


@pytest.mark.slow
def test_an_op_without_a_fake_kernel_is_od212_and_fixed_by_a_verified_chain(tmp_path: Path) -> None:
    fixture = ROOT / "fixtures" / "export" / "od212_extension_op_without_fake.py"
    done = subprocess.run([sys.executable, "-m", "onnxdoctor", "diagnose", str(fixture), "--json"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, env=ENV, check=False)
    finding = json.loads(done.stdout)["findings"][0]
    assert (finding["code"], finding["op"]) == ("OD212", "myext::scaled_tanh")
    best = finding["fixes"][0]
    assert best["kind"] == "chain" and best["verified"] is True
    assert "register_fake('myext::scaled_tanh')" in best["snippet"]
    assert best["snippet"].index("register_fake") < best["snippet"].index("Step 2 of 2")
