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


# SonyCSLParis/pesto#38: a complex magnitude (view_as_complex, which the TorchScript exporter has
# no symbolic for) rolled by a shift read off a buffer (`roll(-round(shift.item() * bins))`): the
# dynamo exporter needs `round` translated, and writes roll's shifts as an attribute, which a size
# computed in the graph cannot be.
ROLLED = '''
import torch
dynamo = False

class Shifted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.tensor(0.37))

    def forward(self, x):
        magnitude = torch.view_as_complex(x.reshape(2, 12, 2)).abs()
        return magnitude.roll(-round(self.shift.item() * 12), -1) * 2

def get_model():
    return Shifted().eval(), (torch.randn(2, 24),)
'''


@pytest.mark.slow
def test_a_roll_by_a_shift_computed_in_the_graph_is_rewritten_as_a_gather(tmp_path: Path) -> None:
    script = tmp_path / "rolled.py"
    script.write_text(ROLLED)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::view_as_complex"), finding
    chains = [f for f in finding.fixes if f.kind == "chain" and "Rewrite aten::roll" in f.title]
    assert chains and chains[0].verified is True, [(f.title, f.check) for f in finding.fixes]
    assert "then Rewrite aten::roll in exportable torch ops" in chains[0].title  # after `round`'s translation


# NVIDIA/physicsnemo#1013: a Fourier neural operator's spectral convolution (complex weights, a
# complex einsum written into the low modes of a complex zeros tensor) exported by the dynamo
# exporter with autograd on: slice_scatter has no derivative for complex outputs.
FNO = CORPUS / "slice_scatter_complex_autograd_fno2d_spectral_conv_dynamo_physicsnemo_1013.py"


@pytest.mark.slow
def test_a_fourier_layer_exports_with_weights_frozen_and_its_complex_ops_as_pairs() -> None:
    (diagnosis,) = diagnose(str(FNO), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::slice_scatter"), finding
    best = finding.fixes[0]
    assert best.verified is True and best.kind == "chain", [(f.title, f.check) for f in finding.fixes]
    assert best.title.startswith("Export with requires_grad off") and "Rewrite aten::complex" in best.title
