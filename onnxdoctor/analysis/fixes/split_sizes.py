"""Split sizes built as a sequence, given to SplitToSequence as the tensor its schema takes.

A scripted `torch.split(x, [int(s) for s in sizes])` (pytorch/pytorch#72498) builds the sizes as
a list, which the TorchScript exporter writes as a sequence (a Loop of SequenceInsert) and passes
to SplitToSequence, whose `split` must be a 1-D tensor: the checker refuses it ("split typestr: I,
has unsupported type: seq(tensor(int64))") and so does ONNX Runtime. One ConcatFromSequence
(new_axis=1) turns the sequence of scalars into that tensor; the sizes stay computed at run time.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import Recipe, SplitSizesAsTensor

CODES = ("OD303", "OD304", "OD499")

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import split_sizes_as_tensor

# after torch.onnx.export(..., 'model.onnx'):
model = onnx.load('model.onnx')
# SplitToSequence takes its sizes as a 1-D tensor: ConcatFromSequence of the sequence built for them
onnx.save(split_sizes_as_tensor(model), 'model.onnx')
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The sizes as a tensor, for a SplitToSequence refused for taking them as a sequence."""
    if "SplitToSequence" not in f"{finding.op} {finding.onnx_op} {finding.message}" or "seq(" not in finding.message:
        return []
    return [Fix(
        kind="split_sizes",
        title="Give SplitToSequence its split sizes as a 1-D tensor (ConcatFromSequence of the sequence "
              "the graph builds)",
        snippet=ctx.rewrite_snippet(SNIPPET),
        applicability=Applicability.SAFE,
        cost="one ConcatFromSequence node per split; the sizes stay computed at run time",
        recipe=Recipe("split_sizes", (ctx.file_rewrite(SplitSizesAsTensor()),)),
    )]
