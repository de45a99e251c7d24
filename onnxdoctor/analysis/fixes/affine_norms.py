"""An instance or batch norm with no weight, whose channel count the TorchScript trace lost.

The TorchScript exporter's symbolics for `aten::instance_norm` and `aten::batch_norm` write a
missing weight and bias as constants as long as the channel dim, and stop with "ONNX export of
instance_norm for unknown channel size" where the trace does not know it (an
`InstanceNorm1d(affine=False)` fed by an LSTM whose output size is dynamic, StyleTTS2's AdaIN).
Ones and zeros built from the input's shape are graph values instead: the same normalization.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD299", "OD205")

SNIPPET = """# before:  self.norm = nn.InstanceNorm1d(channels, affine=False)
# Either make the norm affine (its weight and bias start as ones and zeros: the same output until
# trained), or pass them built from the input's shape, which the export keeps dynamic:
y = F.instance_norm(x, weight=torch.ones(x.shape[1], dtype=x.dtype),
                    bias=torch.zeros(x.shape[1], dtype=x.dtype))
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The norm given a weight and bias of the input's channel count, for the refusal above."""
    if ctx.target_kind != "script" or "unknown channel size" not in f"{finding.message} {ctx.export_error}":
        return []
    op = finding.op or "the norm"
    where = f" at {finding.source}" if finding.source else ""
    return [Fix(
        kind="affine_norm",
        title=f"Give {op}{where} a weight of ones and a bias of zeros as long as its input's channel dim",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost=("none at run time: a multiply by one and an add of zero; checked by exporting with every "
              "instance and batch norm given them"),
        recipe=Recipe("affine_norm", (EagerExport(affine_norms=True), UseExporter("torchscript")), isolated=True),
    )]
