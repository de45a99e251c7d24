"""General mechanisms for failures not seen before (issue 22), written after the fifty-ninth
first-seen batch (fixtures/corpus/first_seen_2026-12-06s.txt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


def test_integers_are_compared_exactly_in_integer_arithmetic() -> None:
    from onnxdoctor.worker.parity import compare_outputs

    # Fingerprints near 4e17: one apart, which float64 cannot tell and rtol would allow.
    expected = np.array([-422726118900060666, 26418], dtype=np.int64)
    actual = expected + np.array([1, 0], dtype=np.int64)
    report = compare_outputs([expected], [actual], 1e-4, 1e-3)
    assert report["code"] == "OD601" and report["max_abs_diff"] == 1.0
    assert compare_outputs([expected], [expected.copy()], 1e-4, 1e-3)["code"] is None
    # A difference of 2**63 (0 against INT64_MIN, a NaN cast to int64) is no agreement.
    low = np.array([np.iinfo(np.int64).min], dtype=np.int64)
    assert compare_outputs([np.zeros(1, dtype=np.int64)], [low], 1e-4, 1e-3)["code"] == "OD601"
    # Floats keep the relative tolerance.
    assert compare_outputs([np.array([1000.0])], [np.array([1000.5])], 1e-4, 1e-3)["code"] is None


@pytest.mark.slow
def test_a_wrong_integer_shift_is_found_where_it_arises() -> None:
    # pytorch/pytorch#191014: `fingerprints >> 4` on signed int64 exported as a Div that truncates;
    # the remainder after it only carries the difference on.
    script = CORPUS / "rshift_signed_fingerprint_qr_embedding_ctr_pytorch_191014.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD601", "aten::__rshift__"), finding


@pytest.mark.slow
def test_a_registered_symbolic_returning_too_few_outputs_names_the_custom_op() -> None:
    # pytorch/FBGEMM#4148: the symbolic registered for fbgemm::dense_to_jagged returns one value for
    # an op of two outputs; torch names the op without its namespace.
    script = CORPUS / "dense_to_jagged_user_symbolic_output_count_hstu_jagged_fbgemm_4148.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD205", "fbgemm::dense_to_jagged"), finding
    assert "returns 1 value(s) where fbgemm::dense_to_jagged returns 2" in finding.message


def test_dims_declared_on_torchscript_default_input_names_are_valid_identifiers() -> None:
    # STVIR/pysot#125: the inputs carry TorchScript's default names ("input.1"), and the dims the
    # SHAPES fix declares on them were named "input.1_0", which torch.export.Dim refuses.
    import torch

    from onnxdoctor.recipe import DeclareDynamic
    from onnxdoctor.worker.fixkit import declared_dynamic
    from onnxdoctor.worker.loader import LoadedModel

    model = torch.nn.Linear(3, 2)
    loaded = LoadedModel(model=model, args=(torch.randn(2, 3),), kwargs={})
    declare = DeclareDynamic(dims=(("input.1", 0, "input.1_0", 1, 64),), inputs=("input.1",))
    shapes = declared_dynamic(loaded, declare, True, {})["dynamic_shapes"]
    assert shapes["input"][0].__name__ == "input_1_0"
    program = torch.export.export(model, loaded.args, dynamic_shapes=shapes)
    placeholder = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "input")
    assert not isinstance(placeholder.meta["val"].shape[0], int)  # the batch is symbolic
