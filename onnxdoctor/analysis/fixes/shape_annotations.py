"""Intermediate shapes the exporter declared wrongly, dropped so ONNX Runtime infers them.

ONNX Runtime plans the buffers of a graph's values from the shapes declared in the file. Where a
declared shape is wrong for the sizes at hand, the node's result does not fit what was planned
and the run stops: "Shape mismatch attempting to re-use buffer. {2,8,16,9,1} != {2,8,16,16,1}"
(the dynamo exporter's opset-20 DFT in a LaMa Fourier unit with dynamic height and width declares
a one-sided FFT's output as wide as its input). The numbers do not depend on the declarations:
without them the runtime takes each shape from the op's own shape inference.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import DropShapeAnnotations, Recipe

CODES = ("OD501",)

# ONNX Runtime's execution frame refusing a result that does not fit its declared shape.
_BUFFER_SHAPE = re.compile(r"Shape mismatch attempting to re-use buffer")

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import drop_shape_annotations

# after torch.onnx.export(..., 'model.onnx'): ONNX Runtime infers the intermediate shapes
model = onnx.load('model.onnx')
onnx.save(drop_shape_annotations(model), 'model.onnx')
# (the same as: del model.graph.value_info[:] in the graph and its subgraphs)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The file without its intermediate shape declarations, for a run refused over one."""
    if not _BUFFER_SHAPE.search(f"{finding.message} {' '.join(finding.evidence)}"):
        return []
    at = f" ({finding.onnx_op or finding.op} {finding.node})" if finding.node else ""
    return [Fix(
        kind="shape_annotations",
        title=f"Drop the intermediate shapes the exporter declared{at}, so ONNX Runtime infers them from the ops",
        snippet=ctx.rewrite_snippet(SNIPPET),
        applicability=Applicability.SAFE,
        cost="none at run time: the same ops; the file no longer states the shapes between nodes",
        recipe=Recipe("shape_annotations", (ctx.file_rewrite(DropShapeAnnotations()),)),
    )]
