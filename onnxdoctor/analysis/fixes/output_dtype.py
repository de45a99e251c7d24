"""Outputs the export computes in another numeric type than PyTorch returns, cast to PyTorch's.

The dynamo exporter computes some ops of a float16 model in float32 and leaves their result
there (CumSum, pytorch/pytorch#111454): the numbers agree to float16 precision, the output's type
does not (OD604). One Cast per output at the end of the graph returns what PyTorch returns,
keeping the exporter. Tried before another exporter (the family comes before `exporter`).
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import CastOutputs, Recipe, RewriteOnnx

CODES = ("OD604",)

_NUMERIC = ("f", "i", "u", "b")  # numpy dtype names: float*, int*, uint*, bool


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A Cast to PyTorch's type for each output whose numeric type differs."""
    rows = ctx.facts_of(Stage.PARITY).get("outputs") or []
    casts = tuple((r["index"], r["torch_dtype"]) for r in rows
                  if r.get("ok") is False and r.get("torch_dtype") != r.get("ort_dtype")
                  and all(str(r.get(k))[:1] in _NUMERIC for k in ("torch_dtype", "ort_dtype")))
    if ctx.target_kind != "script" or not casts:
        return []
    shown = ", ".join(f"output {index} to {dtype}" for index, dtype in casts)
    snippet = (
        "import onnx\n"
        "from onnxdoctor.onnxkit.transforms import cast_outputs\n\n"
        "# after torch.onnx.export(..., 'model.onnx'):\n"
        "model = onnx.load('model.onnx')\n"
        "# the graph leaves these outputs in another type than PyTorch returns: cast them to PyTorch's\n"
        f"onnx.save(cast_outputs(model, {casts!r}), 'model.onnx')\n"
    )
    return [Fix(kind="cast", title=f"Cast {shown} at the end of the graph, as PyTorch returns it",
                snippet=snippet, applicability=Applicability.SAFE,
                cost="one Cast per output; values the graph computed wider are rounded to PyTorch's type, "
                     "as PyTorch returns them",
                recipe=Recipe("cast_outputs", (RewriteOnnx(CastOutputs(casts)),)))]
