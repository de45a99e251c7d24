"""General mechanisms for failures not seen before (issue 22), written after the twenty-eighth
first-seen batch (fixtures/corpus/first_seen_2026-12-05s.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(path: Path, *, fix: bool = True, checks: int = 1) -> Finding:
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=checks))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_text_beside_tensor_outputs_is_left_to_the_caller() -> None:
    # A speaker classifier returns its label strings beside the scores: the tensors alone export.
    finding = _diagnosed(CORPUS / "str_list_output_text_lab_ecapa_encoder_classifier_pytorch_107929.py", checks=4)
    assert finding.code == "OD299" and "text or bytes" in finding.message
    best = finding.fixes[0]
    assert best.kind == "tensor_outputs" and best.verified, [(f.kind, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_one_tensor_passed_as_several_inputs_is_said_and_given_distinct_copies() -> None:
    # torch.export takes the five aliased example inputs for one: the graph reads only z, which
    # differs wherever the inputs do (get_inputs2).
    (diagnosis,) = diagnose(str(CORPUS / "aliased_example_inputs_list_add_dynamo_pytorch_139646.py"),
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code in ("OD601", "OD803")
    assert any("one tensor as inputs 0, 1, 2, 3, 4" in note for note in finding.notes), finding.notes
    best = finding.fixes[0]
    assert best.kind == "distinct_inputs" and best.verified, [(f.kind, f.verified) for f in finding.fixes]
    assert "get_inputs2()" in (best.check.detail or "")


@pytest.mark.slow
def test_dynamic_axes_of_a_list_argument_are_declared_per_tensor() -> None:
    # input_names names each tensor of the list argument x; torch.onnx's conversion put y's dim on
    # x[0]. Written by hand, each name goes with its own tensor (and the dims tied to it).
    finding = _diagnosed(CORPUS / "dynamic_axes_list_input_names_dynamo_pytorch_140748.py")
    # torch.export's "user-specified dim hint ... inferred a static shape": the corpus file's OD208.
    assert finding.code == "OD208"
    fix = next(f for f in finding.fixes if f.kind == "dynamic_shapes")
    assert fix.verified, fix.check
    assert "'x': [{0: Dim.AUTO}, {0: Dim.AUTO}, {0: Dim.AUTO}]" in fix.snippet
    assert "'y': {0: Dim.AUTO}" in fix.snippet and "'bs': None" in fix.snippet
