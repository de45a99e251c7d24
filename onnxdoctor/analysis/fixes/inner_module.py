"""The module a model wraps, exported in its place.

Training code wraps models: `nn.DataParallel` and `DistributedDataParallel` (whose export the
TorchScript exporter refuses outright, or fails tracing the process group: MEAL-V2#26,
only_train_once#44), an `AveragedModel` of EMA weights, or a LightningModule that holds the
network as `self.model` and never defines forward() of its own (image-to-latex#3: "missing the
required forward function"). The LOAD stage names the wrapper's `module`, or, where forward()
raised at the example, the submodules whose own forward() takes the example inputs
(`inner_modules`). The fix exports that submodule; it is checked against the same submodule run
by PyTorch, and the title says which module the ONNX model computes.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108", "OD202", "OD203", "OD204", "OD299")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """One fix for each submodule the LOAD stage found to export in the model's place."""
    names = ctx.facts_of(Stage.LOAD).get("inner_modules") or []
    if ctx.target_kind != "script" or not names:
        return []
    fixes = []
    for name in names[:2]:
        code = f"model = model.{name}  # the module the model wraps, which takes the same inputs\n"
        wrapper = name == "module"
        fixes.append(Fix(
            kind="inner_module",
            title=(f"Export model.{name}, the module the wrapper holds, instead of the wrapper" if wrapper else
                   f"Export model.{name}, a submodule that takes the example inputs, since the model's own "
                   "forward() raises"),
            snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
            applicability=Applicability.SAFE if wrapper else Applicability.UNSAFE,
            cost=("none: the wrapper adds nothing at inference; its weights are the module's" if wrapper else
                  f"the ONNX model computes model.{name}'s forward(), checked against PyTorch's at the example: "
                  "make sure it is your inference path"),
            recipe=Recipe("inner_module", (LoadCode(code),), isolated=True),
        ))
    return fixes
