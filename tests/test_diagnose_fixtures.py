"""Every fixture through the real pipeline: the code, op, node and stage onnxdoctor reports.

Real torch exports, the real onnx checker and real ONNX Runtime sessions in worker subprocesses;
fixtures/expected.py says what each one must produce.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor.model import Diagnosis, Severity, Stage, Status
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
EXPECTED: tuple[Any, ...] = runpy.run_path(str(FIXTURES / "expected.py"))["FIXTURES"]

# Targets that need a factory suffix or a short timeout.
SUFFIX = {"healthy/form_named_factory.py": ":make_small"}
SHORT_TIMEOUT = {"tool/od902_hang.py", "tool/od902_grandchild_sleeps.py"}
# Paths that cannot be diagnosed as a target (usage errors, tested in test_cli_diagnose.py).
USAGE_ERRORS = {"load/od101_does_not_exist.py", "load/od102_directory", "load/od102_not_python.txt"}


def _run(fixture: Any) -> Diagnosis:
    target = str(FIXTURES / fixture.path) + SUFFIX.get(fixture.path, "")
    # 10 s: the worker reaches get_model() (torch imported) before it is killed; the grandchild's
    # end is checked in test_cli_diagnose and test_output_safety.
    timeout = 10.0 if fixture.path in SHORT_TIMEOUT else 180.0
    # Hostile files that allocate without bound are only ever run under a small cap.
    cap = 512 if fixture.path.startswith("tool/") and fixture.path.endswith(".onnx") else None
    return diagnose(target, DiagnoseOptions(fix=False, timeout=timeout, max_memory_mb=cap))[0]


# Fixtures that other tests below read too: diagnosed once (a module fixture), checked by both.
HEADLINE = "export/od203_custom_op_myselu.py"
RUNTIME = "ort_load/od402_det_float64.py"
SHARED = (HEADLINE, RUNTIME)
CASES = [f for f in EXPECTED if f.path not in USAGE_ERRORS and f.path not in SHARED]
SHARED_CASES = [f for f in EXPECTED if f.path in SHARED]


@pytest.fixture(scope="module")
def shared_diagnoses() -> dict[str, Diagnosis]:
    return {f.path: _run(f) for f in SHARED_CASES}


@pytest.mark.parametrize("fixture", CASES, ids=[f.path for f in CASES])
def test_fixture_produces_its_code(fixture: Any) -> None:
    check_fixture(fixture, _run(fixture))


@pytest.mark.parametrize("fixture", SHARED_CASES, ids=[f.path for f in SHARED_CASES])
def test_shared_fixture_produces_its_code(fixture: Any, shared_diagnoses: dict[str, Diagnosis]) -> None:
    check_fixture(fixture, shared_diagnoses[fixture.path])


def check_fixture(fixture: Any, diagnosis: Diagnosis) -> None:
    """The code, stage, op and node fixtures/expected.py gives the fixture, and it comes first."""
    codes = [f.code for f in diagnosis.findings]
    if fixture.code is None:
        errors = [f"{f.code}: {f.message}" for f in diagnosis.findings if f.severity is Severity.ERROR]
        assert errors == [], f"healthy fixture reported {errors}"
        assert [s.status for s in diagnosis.stages] == [Status.PASSED] * len(diagnosis.stages)
        return
    assert fixture.code in codes, f"expected {fixture.code}, got {codes}: {[f.message for f in diagnosis.findings]}"
    finding = next(f for f in diagnosis.findings if f.code == fixture.code)
    assert finding.stage is (Stage.TOOL if fixture.stage == "tool" else Stage(fixture.stage)) or (
        fixture.code == "OD205" and finding.stage is Stage.EXPORT
    )
    if fixture.op:
        # dynamo names the decomposed linalg op aten::_linalg_eigh
        assert finding.op in (fixture.op, fixture.op.replace("aten::", "aten::_")), finding
    if fixture.node:
        assert finding.node == fixture.node, finding
    # The first error is the one the user must fix first: it must be this code, or the
    # symptom this code explains (training mode shows up as a parity mismatch).
    errors = [f.code for f in diagnosis.findings if f.severity is Severity.ERROR]
    if errors and finding.severity is Severity.ERROR:
        assert errors[0] == fixture.code, errors
    # A message that carries the fixture's raw words when they are about the user's problem.
    assert finding.message and "Traceback" not in finding.message


def test_headline_fixture_points_at_the_users_line(shared_diagnoses: dict[str, Diagnosis]) -> None:
    diagnosis = shared_diagnoses[HEADLINE]
    finding = diagnosis.findings[0]
    assert finding.code == "OD203"
    assert finding.op == "mynamespace::myselu"
    source_file, _, line = (finding.source or "").partition(":")
    assert source_file == "od203_custom_op_myselu.py"
    text = (FIXTURES / "export/od203_custom_op_myselu.py").read_text().splitlines()[int(line) - 1]
    assert "myselu" in text, f"source line {line} is {text!r}"
    kinds = [fix.kind for fix in finding.fixes]
    assert kinds[:3] == ["decompose", "custom_op_dynamo", "custom_op_torchscript"]
    symbolic = next(f for f in finding.fixes if f.kind == "custom_op_torchscript").snippet
    assert "g.op('mynamespace::MYSELU', x).setType(x.type())" in symbolic
    assert "register_custom_op_symbolic('mynamespace::myselu', myselu_symbolic, 1)" in symbolic
    assert all(fix.verified is None for fix in finding.fixes)


def test_kernel_table_types_are_listed_for_missing_implementation() -> None:
    diagnosis = diagnose(str(FIXTURES / "ort_load/od402_det_float64.onnx"), DiagnoseOptions(fix=False))[0]
    finding = next(f for f in diagnosis.findings if f.code == "OD402")
    assert "double" in finding.message and "float" in finding.message
    assert any(item.startswith("kernel:") and "tensor(float)" in item for item in finding.evidence)


def test_both_exporters_report_separately() -> None:
    diagnoses = diagnose(str(FIXTURES / "export/od203_custom_op_myselu.py"),
                         DiagnoseOptions(fix=False, exporter="both"))
    assert [d.exporter for d in diagnoses] == ["dynamo", "torchscript"]
    assert [d.findings[0].code for d in diagnoses] == ["OD203", "OD203"]
    assert "dynamo" in diagnoses[0].findings[0].message and "TorchScript" in diagnoses[1].findings[0].message


def test_runtime_finding_points_at_the_users_line_through_the_exported_node(
        shared_diagnoses: dict[str, Diagnosis]) -> None:
    # dynamo stores each node's stack trace in the model; the finding names the node, so its line.
    path = FIXTURES / RUNTIME
    diagnosis = shared_diagnoses[RUNTIME]
    assert diagnosis.exporter == "dynamo"  # the script sets none: torch's default exporter ran
    finding = next(f for f in diagnosis.findings if f.code == "OD402")
    assert finding.source is not None and finding.source.startswith("od402_det_float64.py:")
    line = path.read_text().splitlines()[int(finding.source.rsplit(":", 1)[1]) - 1]
    assert "det" in line
