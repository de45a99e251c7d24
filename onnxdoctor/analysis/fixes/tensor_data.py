"""What forward() does through `.data`, traced: the TorchScript tracer records neither a read of
`x.data` nor an assignment to it, so BinaryNet's `input.data = input.data.sign()` leaves the graph
computing with the input before its sign (pytorch#51033), and a value read through `.data` is a
constant of the graph. The export runs with `.data` traced (recipe.EagerExport.traced_data); the
user's edit is to drop `.data` (`input = input.sign()`), which is what that patch does.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

# The codes a value lost or frozen through `.data` shows as: wrong numbers, at the example or at
# other inputs and sizes.
CODES = ("OD601", "OD603", "OD210", "OD802", "OD803")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with `.data` traced, where forward() read or assigned it while traced."""
    sites, where = ctx.traced_sites("data_sites")
    if not sites:
        return []
    return [Fix(
        kind="traced_data",
        title=f"Drop `.data` where forward() uses it ({where}): the tracer does not record it",
        snippet=(
            f"# {where}: the TorchScript tracer records neither reading nor assigning `.data`, so the\n"
            "# graph keeps the value from before the assignment (or the example's value as a constant).\n"
            "# Write it as ordinary tensor code:\n"
            "#   input.data = Binarize(input.data)   ->   input = Binarize(input)\n"
            "#   w = self.weight.data                ->   w = self.weight.detach()\n"
        ),
        applicability=Applicability.SAFE,
        cost="none at run time; an edit of the lines that use .data (training code that relies on .data "
             "to bypass autograd can keep it behind `if self.training:`)",
        recipe=Recipe("traced_data", (EagerExport(traced_data=True), UseExporter("torchscript")), isolated=True),
    )]
