"""How the example reaches torch.onnx.export: a dict at the end of `args` is read as keyword
arguments (torch.onnx.export's documented convention), so a forward() whose last positional
argument is a dict (face-vid2vid's keypoints, SadTalker-Video-Lip-Sync#64) is called without it:
"forward() missing 1 required positional argument". An empty dict after it keeps it positional
(recipe.TrailingDict).
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import Recipe, TrailingDict

CODES = ("OD299", "OD204")

_MISSING = re.compile(r"missing (?:\d+ required (?:positional )?argument|a required argument)")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """An empty dict after the example's last positional dict, where forward() missed an argument."""
    if ctx.target_kind != "script" or not ctx.facts_of(Stage.LOAD).get("trailing_dict"):
        return []
    if not _MISSING.search(f"{finding.message} {ctx.export_error}"):
        return []
    return [Fix(
        kind="trailing_dict",
        title="Put an empty dict after the inputs: torch.onnx.export reads a dict at the end of args as "
              "keyword arguments",
        snippet=(
            "# The last input is a dict, which torch.onnx.export takes for keyword arguments, so\n"
            "# forward() misses its last positional argument. A dict after it keeps it positional:\n"
            "torch.onnx.export(model, (*example_inputs, {}), 'model.onnx')\n"
        ),
        applicability=Applicability.SAFE,
        cost="none: the same call, with the exporter's convention for a trailing dict",
        recipe=Recipe("trailing_dict", (TrailingDict(),)),
    )]
