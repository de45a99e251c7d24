"""General mechanisms for failures not seen before (issue 22), written before and after the
seventeenth first-seen batch (fixtures/corpus/first_seen_2026-12-05g.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Diagnosis
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(tmp_path: Path, source: str, **options: bool) -> Diagnosis:
    """The diagnosis of `source` written as the model script model.py."""
    script = tmp_path / "model.py"
    script.write_text(source)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(**options))
    return diagnosis


@pytest.mark.slow
def test_a_spectrum_built_with_a_python_complex_number_is_exported_as_pairs() -> None:
    # magnitude * exp(phase * 1j) into istft: TorchScript has no complex numbers at all, and the
    # dynamo exporter lowers neither a product with 1j nor a complex exp.
    (diagnosis,) = diagnose(str(CORPUS / "complex_scalar_1j_phase_istft_mb_istft_vits2_3.py"),
                            DiagnoseOptions(fix=True))
    best = diagnosis.findings[0].fixes[0]
    assert best.verified is True, [(f.title, f.check) for f in diagnosis.findings[0].fixes]
    assert best.title.startswith("Rewrite aten::complex")
    assert best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-4
