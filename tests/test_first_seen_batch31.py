"""General mechanisms for failures not seen before (issue 22), written after the thirty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-05v.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_rewrite_for_a_torchscript_script_keeps_its_dynamic_axes() -> None:
    # UperNet's pyramid pooling with dynamic batch, height and width: the TorchScript exporter
    # refuses adaptive_avg_pool2d ("input size not accessible"); the library's rewrite, captured by
    # torch.export with the script's dynamic_axes as dynamic_shapes (batch 1 doubled so that it
    # stays dynamic), is checked at get_inputs2's other batch and sizes.
    path = CORPUS / "adaptive_avg_pool2d_input_size_not_accessible_dynamic_hw_upernet_ppm_mmsegmentation_1840.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::adaptive_avg_pool2d")
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified and "Dim.AUTO" in best.snippet, \
        [(f.title, f.verified) for f in finding.fixes]
