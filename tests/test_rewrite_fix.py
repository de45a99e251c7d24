"""The 'rewrite' fix family: proposals from the op-rewrite library, and one verified end to end."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from onnxdoctor.analysis.fixes import propose_fixes
from onnxdoctor.model import Applicability, DiagnoseOptions, Finding, Severity, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import ExportCode
from onnxdoctor.render.codes import explanation_as_printed
from onnxdoctor.rewrites import REWRITES

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _rewrite_fixes(code: str, op: str | None) -> list:
    finding = Finding(code, Stage.EXPORT, Severity.ERROR, "export failed", op=op)
    return [f for f in propose_fixes(finding, {}) if f.kind == "rewrite"]


def test_an_op_the_library_covers_gets_its_rewrite_as_a_pasteable_snippet() -> None:
    [fix] = _rewrite_fixes("OD202", "prims::erf_inv")  # dynamo names the prims op
    tree = ast.parse(fix.snippet)
    assert "erfinv" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "table = {torch.ops.aten.erfinv.default: erfinv}" in fix.snippet
    assert "program = program.run_decompositions(table)" in fix.snippet
    assert fix.applicability is Applicability.UNSAFE  # an approximation: the user decides
    code = fix.recipe.first(ExportCode) if fix.recipe else None
    assert code and code.code in fix.snippet and code.program == "program"


def test_every_overload_of_an_op_is_rewritten_in_one_snippet() -> None:
    [fix] = _rewrite_fixes("OD202", "aten::median")
    assert "torch.ops.aten.median.default: median" in fix.snippet
    assert "torch.ops.aten.median.dim: median_dim" in fix.snippet
    assert fix.applicability is Applicability.SAFE
    ast.parse(fix.snippet)


def test_ops_outside_the_library_and_other_codes_get_no_rewrite() -> None:
    assert _rewrite_fixes("OD202", "aten::linalg_eig") == []
    assert _rewrite_fixes("OD202", None) == []
    assert _rewrite_fixes("OD601", "aten::cumprod") == []


def test_explain_od202_lists_every_op_of_the_library() -> None:
    text = explanation_as_printed("OD202")
    for rewrite in REWRITES:
        assert f"`{rewrite.op}` ({rewrite.family}, {rewrite.exactness.value}" in text
    assert text.index("op-rewrite library") < text.index("## Example")


@pytest.mark.slow
def test_cumprod_from_a_public_thread_is_fixed_by_a_verified_rewrite() -> None:
    diagnosis = diagnose(str(CORPUS / "cumprod_pytorch_102948.py"), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::cumprod")
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified is True, best.check
    assert best.check is not None and best.check.reached is Stage.PARITY
    assert best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-4


@pytest.mark.slow
def test_every_unsupported_op_is_named_in_one_run_and_rewritten_in_one_fix() -> None:
    fixture = CORPUS.parent / "export" / "od202_several_unsupported_ops.py"
    diagnosis = diagnose(str(fixture), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD202" and finding.source == "od202_several_unsupported_ops.py:20"
    # The exporter stopped at the first op; the finding names the other two, with their lines.
    assert "aten::linalg_cholesky_ex (od202_several_unsupported_ops.py:21)" in finding.message
    assert "prims::lgamma (od202_several_unsupported_ops.py:22)" in finding.message
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified is True, best.check
    for op in ("aten::cumprod", "aten::linalg_cholesky", "aten::lgamma"):
        assert op in best.title
    assert best.check is not None and best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-4


@pytest.mark.slow
def test_int_repr_gets_a_torchscript_symbolic_that_matches_eager_exactly(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import onnxruntime as ort

    finding = Finding("OD202", Stage.EXPORT, Severity.ERROR, "export failed", op="aten::int_repr")
    [fix] = [f for f in propose_fixes(finding, {"exporter": "torchscript"}) if f.kind == "rewrite"]
    assert fix.recipe is not None and fix.recipe.isolated  # a symbolic registration is process-wide
    assert not [f for f in propose_fixes(finding, {"exporter": "dynamo"}) if f.kind == "rewrite"]

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.quantize_per_tensor(x, 0.5, 3, torch.qint8).int_repr()

    # Ties (x.25 -> 0.5 steps of 0.5 scale), saturation at both ends, and ordinary values.
    x = torch.cat([torch.tensor([0.25, 0.75, -0.25, 1.25, -1.25, 1e3, -1e3]), torch.randn(20) * 30])
    step = fix.recipe.first(ExportCode)
    assert step is not None
    try:
        exec(compile(step.code, "<int_repr symbolic>", "exec"), {})  # noqa: S102 - the snippet, as pasted
        torch.onnx.export(Model(), (x,), str(tmp_path / "m.onnx"), dynamo=False, opset_version=13)
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::int_repr", 10)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    assert got.dtype.name == "int8"
    diff = (torch.from_numpy(got).int() - Model()(x).int()).abs()
    ties = (x / 0.5 - 0.5) == torch.floor(x / 0.5)  # with the odd zero point 3: the stated limit
    assert (diff[~ties] == 0).all() and (diff[ties] <= 1).all()
    assert "off by one at exact ties" in fix.cost
