"""A forward() that takes `*args`, `**kwargs` or keyword-only arguments, exported through a
wrapper whose forward() names each input.

Both exporters read the inputs off forward()'s signature. The TorchScript exporter passes on only
the keyword inputs forward() names, so a `**kwargs` key never arrives ("KeyError: 'input'",
pytorch/pytorch#110439); torch.export keys `dynamic_shapes` by forward()'s parameters, so dims
declared for an input that `*args` or `**kwargs` takes do not match ("inputs[3] is a tuple, but
dynamic_shapes[3] is a dict", ComfyUI_TensorRT#120; "top-level keys must be the arg names",
pytorch/pytorch#150371). A wrapper with one named parameter per input, calling the model as the
script does (positional inputs by position, keyword inputs by key), gives both what they read.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD203", "OD204", "OD205", "OD208", "OD299")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The wrapper naming every input, for an export that failed on a variadic forward()."""
    plan = ctx.facts_of(Stage.LOAD).get("variadic_inputs")
    if ctx.target_kind != "script" or not isinstance(plan, dict) or finding.stage is not Stage.EXPORT:
        return []
    names = [str(n) for n in plan.get("names") or ()]
    positional = int(plan.get("positional") or 0)
    keys = [str(k) for k in plan.get("keywords") or ()]
    if not names or len(names) != positional + len(keys):
        return []
    code = wrapper_code(names, positional, keys)
    taken = ", ".join(str(v) for v in plan.get("variadic") or ())
    return [Fix(
        kind="named_inputs",
        title=f"Export a wrapper whose forward() names each input ({', '.join(names)}) instead of {taken}",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')  # with your dynamic_shapes or "
                       "dynamic_axes, keyed by these names\n",
        applicability=Applicability.SAFE,
        cost="none for the model: the wrapper calls it as your code does; the ONNX model takes every input by "
             "position, named as above",
        # The model changes at LOAD: a worker of its own (docs/ARCHITECTURE.md).
        recipe=Recipe("named_inputs", (LoadCode(code),), isolated=True),
    )]


def wrapper_code(names: list[str], positional: int, keys: list[str]) -> str:
    """A wrapper module over `model` taking `names` as parameters, and the example as positional inputs."""
    parameters = ", ".join(names)
    call = [*names[:positional], *(f"{key}={name}" for key, name in zip(keys, names[positional:]))]
    return (
        "import torch\n\n\n"
        "class NamedInputs(torch.nn.Module):\n"
        "    \"\"\"The model, behind a forward() with one named parameter per input.\"\"\"\n\n"
        "    def __init__(self, model):\n"
        "        super().__init__()\n"
        "        self.model = model\n\n"
        f"    def forward(self, {parameters}):\n"
        f"        return self.model({', '.join(call)})\n\n\n"
        "model = NamedInputs(model)\n"
        + ("example_inputs = (*example_inputs, *example_kwargs.values())\nexample_kwargs = {}\n" if keys else "")
    )
