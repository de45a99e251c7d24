"""General mechanisms for failures not seen before (issue 22), written after the twenty-fifth
first-seen batch (fixtures/corpus/first_seen_2026-12-05p.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _first(name: str) -> Finding:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=False, check_shapes=False))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_a_failure_while_converting_the_exporters_placeholder_names_the_op_it_stands_for() -> None:
    # `final[b, :, z, x, y] = ...` (non-consecutive index tensors): the TorchScript exporter's
    # index_put symbolic raises while converting its onnx::Placeholder node.
    finding = _first("index_put_nonconsecutive_lss_voxel_pooling_pytorch_119993.py")
    assert (finding.code, finding.op) == ("OD299", "aten::index_put"), finding.message
    assert finding.source and finding.source.endswith(":80")


@pytest.mark.slow
def test_of_two_frozen_values_the_one_taken_out_of_data_is_named_before_a_size_check() -> None:
    # OpenPCDet's scatter: `batch_size = coords[:, 0].max().int().item() + 1` (line 107) freezes the
    # batch count; a size check earlier (`if inputs.shape[0] > self.part:`, line 43) holds at the
    # other inputs too.
    finding = _first("item_frozen_batch_size_pointpillar_scatter_openpcdet_228.py")
    assert (finding.code, finding.op) == ("OD210", "aten::item"), finding.message
    assert finding.source and finding.source.endswith(":107")


def test_bytes_in_the_outputs_are_said_before_the_torchscript_exporter_crashes_on_them() -> None:
    # CompressAI's compress(): byte strings from an entropy coder. torch decodes them as UTF-8 in
    # C++ and a fresh worker died of SIGSEGV there (OD901).
    finding = _first("bytes_output_entropy_coder_strings_compress_compressai_287.py")
    assert finding.code == "OD299" and finding.stage.value == "export"
    assert "output['strings'][0][0] (bytes)" in finding.message
