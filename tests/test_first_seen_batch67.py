"""General mechanisms for failures not seen before (issue 22), written after the sixty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-07g.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# pytorch#65039: LaneGCN's lane fusion adds each relation's Linear output into the lane nodes with
# index_add_, whose destinations repeat; the TorchScript export at opset 12 writes a scatter
# without a sum. The exporter converts the relations' Linear calls in another order than the trace
# ran them, so the call-by-call search must not pin the difference on one of them.
LANE_FUSION = Path(__file__).parents[1] / "fixtures" / "corpus" / "index_add_duplicate_lane_edges_opset12_lanegcn_mapnet_pytorch_65039.py"


@pytest.mark.slow
def test_a_mismatch_is_not_pinned_on_a_call_the_exporter_converted_out_of_trace_order(tmp_path: Path) -> None:
    script = tmp_path / "fusion.py"
    script.write_text(LANE_FUSION.read_text())
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = next(f for f in diagnosis.findings if f.code == "OD601")
    assert finding.op == "aten::index_add", (finding.op, finding.message)
