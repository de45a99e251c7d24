"""Writes into a tensor forward() built from Python data, lost or doubled in the TorchScript export.

The tracer holds a tensor built from Python data (`torch.tensor([[1.0, 0.0, -1.0], ...])`) as a
constant of the graph, by reference: when forward() then writes into it in place (kornia's
`normal_transform_pixel`: `tr_mat[0, 0] = tr_mat[0, 0] * 2.0 / width_denom`), the constant the
file gets already holds the written values, and the graph applies the writes to it once more.
The export matches PyTorch only by chance. Cloning the tensor where it is built makes the writes
land on a traced value (recipe.EagerExport.cloned_constants).
"""

from __future__ import annotations

import re
from pathlib import Path

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.sources import source_lines
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

# `name = <call>`: one name bound to what the line builds (not a tuple, not a comparison).
_ONE_ASSIGNMENT = re.compile(r"^[\w.]+\s*=(?!=)")
# Wrong numbers, at the example or at other inputs and sizes.
CODES = ("OD601", "OD603", "OD210", "OD802", "OD803")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with the tensors forward() builds from data and writes into cloned."""
    sites, where = ctx.traced_sites("written_constants")
    if not sites:
        return []
    return [Fix(
        kind="cloned_constants",
        title=f"Clone the tensor built from Python data that forward() writes into in place ({where})",
        snippet=(
            f"# {where}: the TorchScript tracer keeps a tensor made from Python data as a constant by\n"
            "# reference, so writing into it afterwards changes the constant too, and the graph may\n"
            "# apply the write a second time. Clone it where it is built (or build it without\n"
            "# in-place writes):\n"
            + "".join(f"{line}\n" for line in _cloned_lines(sites, ctx))
        ),
        applicability=Applicability.SAFE,
        cost="none at run time (the clone is an Identity the runtime folds); an edit of the lines above",
        recipe=Recipe("cloned_constants", (EagerExport(cloned_constants=True), UseExporter("torchscript")),
                      isolated=True),
    )]


def _cloned_lines(sites: list[str], ctx: FixContext) -> list[str]:
    """Each site's line with `.clone()` after what it builds, where the line is one assignment
    (`t = torch.tensor([...])`); a generic example where it cannot be read."""
    folder = Path(ctx.target_path).parent if ctx.target_path else None
    lines = []
    for site in sites[:3]:
        found = source_lines(site, folder)
        line = found[0].strip() if found else ""
        # One assignment of one built tensor: `.clone()` after it is the edit.
        if _ONE_ASSIGNMENT.match(line) and line.endswith(")") and "#" not in line:
            lines.append(f"{line}.clone()  # {site}")
    return lines or ["# for example:", "t = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).clone()",
                     "t[0, 0] = 2.0 / w  # a write into the clone, which the graph records"]
