"""forward() read a drop-probability attribute the model never set (OD108).

NAS and regularised networks read a drop-path or dropout probability from an attribute their
training loop writes every epoch (`model.drop_path_prob = args.drop_path_prob * epoch / epochs` in
DARTS, PC-DARTS, P-DARTS and their descendants) and their constructors never set; a model built for
export raises "'NetworkCIFAR' object has no attribute 'drop_path_prob'" (quark0/darts#147). Such a
probability means "drop nothing" at 0, which is what inference uses (the layers also check
`self.training`). The route sets the attribute to 0.0 on the modules of the class that lacked it;
an attribute of any other name is not guessed at.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
# Names of a rate whose inference value is 0: drop path, dropout, drop block. (A survival or keep
# probability means "keep all" at 1.0: not one of these.)
_DROP_RATE = re.compile(r"drop", re.IGNORECASE)

SET_ZERO = '''
# {cls}.{name} is written by the training loop, not by the constructor: 0.0 drops nothing.
for _module in model.modules():
    if type(_module).__name__ == {cls!r} and not hasattr(_module, {name!r}):
        setattr(_module, {name!r}, 0.0)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The drop probability forward() read set to 0.0, where the model never set it."""
    match = _MISSING.search(ctx.load_error_text(finding))
    if ctx.target_kind != "script" or match is None or not _DROP_RATE.search(match.group(2)):
        return []
    cls, name = match.groups()
    code = SET_ZERO.format(cls=cls, name=name)
    return [Fix(
        kind="unset_attributes",
        title=f"forward() reads {cls}.{name}, which the training loop sets and the constructor does not: "
              f"set it to 0.0 (drop nothing, as inference does) before the export",
        snippet=code.lstrip("\n") + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.SAFE,
        cost=f"none at inference where {name} only scales a drop done in training; if the model uses it "
             "otherwise, set the value it was trained to end with",
        recipe=Recipe("unset_attributes", (LoadCode(code),), isolated=True),
    )]
