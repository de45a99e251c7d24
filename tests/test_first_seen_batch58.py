"""General mechanisms for failures not seen before (issue 22), written after the fifty-eighth
first-seen batch (fixtures/corpus/first_seen_2026-12-06r.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
# pytorch/pytorch#145300: an early-exit ViT whose torch.cond branch returns its input unchanged
# (torch.export refuses the aliasing) and whose exit branch writes the fast-pass token in place.
EARLY_EXIT = CORPUS / "cond_inplace_branch_fast_pass_early_exit_vit_dynamo_pytorch_145300.py"


@pytest.mark.slow
def test_a_cond_branch_returning_its_input_is_named_and_computed_as_a_selection() -> None:
    (diagnosis,) = diagnose(str(EARLY_EXIT), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD204", "higher_order::cond"), finding
    line = EARLY_EXIT.read_text().splitlines().index("            x_with_fastpass = torch.cond(") + 1
    assert f"branches of higher_order::cond at {EARLY_EXIT.name}:{line}" in finding.message
    # Each branch gets its own copy of the operands: the in-place write of one does not reach
    # the other, whose output the selection may take.
    fix = next(f for f in finding.fixes if f.kind == "control_flow")
    assert fix.verified is True, fix.check
