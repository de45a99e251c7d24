"""An output name the graph already uses for another value (OD306), given after the export instead.

The dynamo exporter applies `output_names` by renaming each output value in place. When a value
inside the graph already has that name (its names follow the ops: an `nn.Embedding`'s output is
`embedding`, a linear layer's `linear`), the written graph has two producers of one name and the
checker refuses it: "Graph must be in single static assignment (SSA) form, however 'embedding' has
been used as output names multiple times". Exported without `output_names`, the graph's names are
its own and unique; renaming the outputs in the file afterwards moves the other value aside first.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import NameOutputs, Recipe

CODES = ("OD306",)

# checks.py's SSA finding, and the checker's own words for it.
_TWICE = re.compile(r"tensor '([^']+)' is produced twice|however '([^']+)' has been used as output names multiple")

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import name_outputs

# export without output_names: the exporter's own names are unique
torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)
# then name the outputs; a value inside the graph that has one of the names is renamed first
model = onnx.load('model.onnx')
onnx.save(name_outputs(model, {names!r}), 'model.onnx')
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The outputs named after the export, for a script whose output name another value has."""
    found = _TWICE.search(f"{finding.message} {' '.join(finding.evidence)}")
    outputs = [str(name) for name in ctx.export_facts.get("graph_outputs") or ()]
    if ctx.target_kind != "script" or not found or (found.group(1) or found.group(2)) not in outputs:
        return []
    # A file given as it is cannot tell which of the two producers the output is; a script's
    # export can be made again without the names.
    duplicate = found.group(1) or found.group(2)
    return [Fix(
        kind="output_names",
        title=f"Name the outputs after the export: the exporter gave output name {duplicate!r} to a value "
              "of the graph as well",
        snippet=SNIPPET.format(names=tuple(outputs)),
        applicability=Applicability.SAFE,
        cost="none: the same graph; the value inside it that had an output's name gets another",
        recipe=Recipe("output_names", (ctx.file_rewrite(NameOutputs(tuple(outputs))),)),
    )]
