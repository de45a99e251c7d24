"""The SHAPES stage: sizes chosen, records judged into OD801-OD804, rendered, and fixes verified.

Unit tests judge hand-written stage records (no export); the slow ones run real exports in
workers: the fixture index (tests/test_diagnose_fixtures.py) already runs each shapes fixture,
so here only what it does not: a declaration fix verified at every checked size, and --shapes /
--no-shapes through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from onnxdoctor.analysis.fixes.shapes import code_edits, declaration_snippet, rewrite_snippet
from onnxdoctor.analysis.shapes import classify_shapes, size_checks
from onnxdoctor.cli.commands import app
from onnxdoctor.cli.diagnose import parse_size_sets
from onnxdoctor.errors import UsageError
from onnxdoctor.model import (
    PIPELINE_STAGES,
    DiagnoseOptions,
    Diagnosis,
    FrozenSize,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.pipeline import diagnose
from onnxdoctor.render.console import render_diagnosis
from onnxdoctor.render.jsonout import to_json
from onnxdoctor.render.markdown import to_markdown
from onnxdoctor.worker.shapes import _size_sets

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "shapes"


def _stage(sizes: list[dict], **facts: object) -> StageOutcome:
    base = {"example": {"x": [2, 12]}, "onnx_inputs": {"x": ["batch", 12]}, "declared": [],
            "inferred_ranges": {}, "exporter": "torchscript", "origin": "declared", "sizes": sizes}
    return StageOutcome(Stage.SHAPES, Status.PASSED, 0.05, facts={**base, **facts})


def _size(batch: int, status: str, **extra: object) -> dict:
    return {"inputs": {"x": [batch, 12]}, "varied": [["x", 0]], "status": status, "max_abs_diff": None,
            "error": None, **extra}


EXPORT = StageOutcome(Stage.EXPORT, Status.PASSED, facts={"node_sources": {"/Reshape": "m.py:28"}})


def test_every_size_passing_is_no_finding() -> None:
    shapes = _stage([_size(3, "passed", max_abs_diff=0.0), _size(4, "passed", max_abs_diff=1e-7)])
    assert classify_shapes(shapes, [EXPORT]) == []
    assert [c.status for c in size_checks(shapes)] == ["passed", "passed"]


def test_a_static_input_nobody_declared_is_a_warning_naming_the_batch() -> None:
    shapes = _stage([_size(3, "refused", kind="input", error="Got invalid dimensions for input: x")],
                    onnx_inputs={"x": [2, 12]}, origin="probed",
                    probes=[{"dims": [["x", 0]], "accepted": True}])
    [finding] = classify_shapes(shapes, [EXPORT])
    assert (finding.code, finding.severity, finding.stage) == ("OD801", Severity.WARNING, Stage.SHAPES)
    assert "this model takes only batch 2" in finding.message
    assert isinstance(finding.detail, FrozenSize) and finding.detail.dims[0][:3] == ("x", 0, "batch")


def test_a_declared_dim_failing_in_a_node_is_an_error_with_the_node_and_line() -> None:
    declared = [{"input": "x", "dim": 0, "name": "batch", "min": None, "max": None}]
    shapes = _stage([_size(3, "failed", kind="node", node="/Reshape", op="Reshape", error="cannot reshape")],
                    declared=declared, frozen_nodes=[{"node": "/Reshape", "op": "Reshape", "value": 2}],
                    size_code=[{"source": "m.py:27", "kind": "int", "text": "b = int(x.shape[0])"}])
    [finding] = classify_shapes(shapes, [EXPORT])
    assert (finding.code, finding.severity) == ("OD802", Severity.ERROR)
    assert (finding.node, finding.op, finding.source) == ("/Reshape", "Reshape", "m.py:28")
    assert "holds the example's size 2" in finding.message


def test_numbers_that_differ_are_OD803_and_a_point_range_is_OD804() -> None:
    declared = [{"input": "x", "dim": 0, "name": "x_0", "min": None, "max": None}]
    diverging = _stage([_size(3, "failed", kind="mismatch", max_abs_diff=1.5)], declared=declared,
                       exporter="dynamo", inferred_ranges={"x": {"0": [0, 2]}})
    assert [f.code for f in classify_shapes(diverging, [EXPORT])] == ["OD803"]
    pinned = _stage([_size(3, "failed", kind="node", node="node_view", op="Reshape")], declared=declared,
                    exporter="dynamo", inferred_ranges={"x": {"0": [2, 2]}})
    [finding] = classify_shapes(pinned, [EXPORT])
    assert finding.code == "OD804" and "range 2..2" in finding.message


def test_an_output_of_another_shape_is_said_over_the_other_outputs_small_difference() -> None:
    # SAM2's mask count frozen at 3 (ailia-models#1514): the second output matches to 6e-8.
    declared = [{"input": "x", "dim": 0, "name": "x_0", "min": None, "max": None}]
    shaped = _stage([_size(3, "failed", kind="mismatch", max_abs_diff=6e-8,
                           error="output 0: shape (1, 3, 32, 32) from ONNX Runtime, (1, 1, 32, 32) from PyTorch")],
                    declared=declared)
    [finding] = classify_shapes(shaped, [EXPORT])
    assert finding.code == "OD803" and "shape (1, 3, 32, 32) from ONNX Runtime" in finding.message, finding.message
    assert "max abs diff" not in finding.message


def test_a_stage_that_did_not_complete_is_a_warning_not_a_failed_export() -> None:
    broken = StageOutcome(Stage.SHAPES, Status.FAILED, 0.1)
    [finding] = classify_shapes(broken, [EXPORT])
    assert (finding.code, finding.severity) == ("OD899", Severity.WARNING)
    assert Stage.SHAPES not in PIPELINE_STAGES  # never in the ladder: the run's verdict stays the stages'


def test_sizes_stay_inside_declared_bounds_and_skip_the_example() -> None:
    sets = _size_sets([([("x", 0)], 2, 5, 1), ([("x", 1)], None, None, 1)], {"x": [4, 16]})
    assert len(sets) == 3
    assert all(2 <= s["x"][0] <= 5 and s != {"x": [4, 16]} for s in sets)
    assert len({tuple(s["x"]) for s in sets}) == 3


def test_snippets_declare_named_dims_and_rewrite_the_users_line() -> None:
    detail = FrozenSize(dims=(("x", 0, "batch", 1, 64), ("mask", 0, "batch", 1, 64)), inputs=("x", "mask"),
                        lines=(("m.py:27", "int", "b = int(x.shape[0])"),
                               ("m.py:28", "view", "return y.view(b, 3, 4)"),
                               ("m.py:30", "range", "for i in range(x.shape[1]):")))
    dynamo = declaration_snippet(detail, "dynamo")
    assert "batch = Dim('batch', min=1, max=64)" in dynamo and "'mask': {0: batch}" in dynamo
    assert "dynamic_axes = {'x': {0: 'batch'}, 'mask': {0: 'batch'}}" in declaration_snippet(detail, "torchscript")
    rewrite = rewrite_snippet(detail)
    assert "+    b = x.shape[0]" in rewrite
    assert "+    return y.view(-1, 3, 4)" in rewrite
    assert "torch.arange(x.shape[1])" in rewrite


def test_shapes_flag_values_parse_and_bad_ones_are_one_usage_error() -> None:
    assert parse_size_sets(("x=4,3,16", "x=4,16;mask=4,16")) == ({"x": [4, 3, 16]}, {"x": [4, 16], "mask": [4, 16]})
    with pytest.raises(UsageError, match="--shapes"):
        parse_size_sets(("x=4,a",))


def test_renderers_show_the_size_matrix_and_json_stays_additive() -> None:
    shapes = size_checks(_stage([_size(3, "passed", max_abs_diff=0.0), _size(4, "failed", kind="node", error="boom")]))
    stages = tuple(StageOutcome(s, Status.PASSED) for s in PIPELINE_STAGES)
    diagnosis = Diagnosis("m.py", "dynamo", stages, (), shapes=shapes, facts={"shapes_seconds": 0.05,
                                                                                "shapes_origin": "declared"})
    document = json.loads(to_json((diagnosis,)))
    assert document["shapes"] == [
        {"inputs": {"x": [3, 12]}, "status": "passed", "max_abs_diff": 0.0, "error": None},
        {"inputs": {"x": [4, 12]}, "status": "failed", "max_abs_diff": None, "error": "boom"},
    ]
    assert [s["stage"] for s in document["stages"]] == [s.value for s in PIPELINE_STAGES]
    console = Console(file=__import__("io").StringIO(), width=100, color_system=None)
    render_diagnosis(console, diagnosis)
    text = console.file.getvalue()
    assert "sizes (declared dynamic dims)" in text and "4x12  failed" in text and "boom" in text
    assert "| 4x12 | failed | \\- | boom |" in to_markdown((diagnosis,))


@pytest.mark.slow
def test_declaring_the_dims_is_verified_at_every_checked_size(tmp_path: Path) -> None:
    options = DiagnoseOptions(all_fixes=True, max_fix_checks=1, localize_budget=0)
    [diagnosis] = diagnose(str(FIXTURES / "od801_fixed_batch_torchscript.py"), options)
    finding = next(f for f in diagnosis.findings if f.code == "OD801")
    fix = next(f for f in finding.fixes if f.kind == "declare_dynamic")
    assert fix.verified, fix.check
    assert fix.check is not None and fix.check.sizes == tuple(
        " ".join(f"{n}={'x'.join(map(str, s))}" for n, s in c.inputs) for c in diagnosis.shapes)
    assert len(fix.check.sizes) >= 3 and all(c.status == "refused" for c in diagnosis.shapes)
    # --write-fix's fix.py exports with the same declaration and checks it against PyTorch.
    from fix_programs import run_fix_program

    run_fix_program(fix, FIXTURES / "od801_fixed_batch_torchscript.py", tmp_path / "fix")


@pytest.mark.slow
def test_explicit_sizes_and_no_shapes_through_the_cli() -> None:
    runner = CliRunner()
    target = str(FIXTURES / "od801_fixed_batch_torchscript.py")  # TorchScript: a quick export
    result = runner.invoke(app, ["diagnose", target, "--json", "--no-fix", "--shapes", "tokens=7,16,8"])
    document = json.loads(result.output)
    assert result.exit_code == 0, result.output  # a fixed-size export is a warning
    assert document["shapes"] == [{"inputs": {"tokens": [7, 16, 8]}, "status": "refused", "max_abs_diff": None,
                                   "error": document["shapes"][0]["error"]}]
    assert "Got invalid dimensions for input: tokens" in document["shapes"][0]["error"]
    assert [f["code"] for f in document["findings"]] == ["OD801"]
    skipped = runner.invoke(app, ["diagnose", target, "--json", "--no-fix", "--no-shapes"])
    assert json.loads(skipped.output)["shapes"] == []


class _Frozen:
    """forward() with each way a trace freezes a size (read as source, never run)."""

    def forward(self, x):  # noqa: ANN001, ANN201
        b = int(x.shape[0])
        y = x.view(b, 3, -1)
        for _i in range(x.shape[1]):
            pass
        if x.size(0) > 2:
            return y
        return y * 2


def test_the_lines_that_turn_a_size_into_a_python_value_are_found() -> None:
    from onnxdoctor.worker.shapes import size_code_lines

    kinds = [(line["kind"], line["text"]) for line in size_code_lines(_Frozen())]
    assert kinds == [("int", "b = int(x.shape[0])"), ("view", "y = x.view(b, 3, -1)"),
                     ("range", "for _i in range(x.shape[1]):"), ("branch", "if x.size(0) > 2:")]
    assert all(line["source"].startswith("test_shapes.py:") for line in size_code_lines(_Frozen()))


def test_the_rewrite_applied_to_forward_keeps_the_size_symbolic_in_a_trace() -> None:
    """What the rewrite_size fix runs in its worker: the fixture's forward with its lines rewritten.
    Traced at batch 2, the original holds the 2 (batch 3 fails in view); the rewritten one does not."""
    import runpy
    import warnings

    import torch

    from onnxdoctor.worker.shapes import size_code_lines
    from onnxdoctor.worker.sizepatch import rewrite_forward

    x = torch.randn(3, 12)

    def traced_at_other_batch(module: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's own warning about int(): the point here
            return torch.jit.trace(module, (torch.randn(2, 12),))(x)

    script = runpy.run_path(str(FIXTURES / "od802_int_batch_reshape.py"))
    model, _ = script["get_model"]()
    lines = tuple((r["source"], r["kind"], r["text"]) for r in size_code_lines(model))
    with pytest.raises(RuntimeError, match="shape"):
        traced_at_other_batch(model)
    edits = code_edits(FrozenSize(lines=lines))
    assert [(old, new) for _n, old, new in edits] == [("b = int(x.shape[0])", "b = x.shape[0]"),
                                                      ("return self.proj(x).view(b, 3, 4).sum(dim=2)",
                                                       "return self.proj(x).view(-1, 3, 4).sum(dim=2)")]
    assert rewrite_forward(model, edits) == 2
    with torch.no_grad():
        assert torch.allclose(traced_at_other_batch(model), model(x), atol=1e-6)
    with pytest.raises(RuntimeError, match="none of the recorded lines"):
        rewrite_forward(model, [(1, "not in forward", "x")])


@pytest.mark.slow
def test_the_users_line_rewritten_is_verified_at_every_checked_size() -> None:
    # Every fix tried: the dynamo exporter's strict capture holds here too, and comes first.
    [diagnosis] = diagnose(str(FIXTURES / "od802_int_batch_reshape.py"),
                           DiagnoseOptions(localize_budget=0, all_fixes=True))
    finding = next(f for f in diagnosis.findings if f.code == "OD802")
    fix = next(f for f in finding.fixes if f.kind == "rewrite_size")
    assert fix.verified, fix.check
    assert fix.check is not None and len(fix.check.sizes) >= 3
    assert "+    b = x.shape[0]" in fix.snippet


@pytest.mark.slow
def test_a_branch_on_the_size_is_kept_by_scripting_and_verified_at_every_size(tmp_path: Path) -> None:
    [diagnosis] = diagnose(str(FIXTURES / "od803_branch_on_batch_dynamo.py"), DiagnoseOptions(localize_budget=0))
    finding = next(f for f in diagnosis.findings if f.code == "OD803")
    fix = next(f for f in finding.fixes if f.kind == "script_branch")
    assert fix.verified, fix.check
    assert fix.check is not None and len(fix.check.sizes) >= 3
    # The traced alternative records the example's branch: tried, and honestly not verified.
    assert not next(f for f in finding.fixes if f.kind == "exporter").verified
    from fix_programs import run_fix_program

    run_fix_program(fix, FIXTURES / "od803_branch_on_batch_dynamo.py", tmp_path / "fix")
