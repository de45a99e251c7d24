"""An example input that is an object holding tensors, passed as those tensors.

Models that take a batch object (torchrec's KeyedJaggedTensor, a graph batch, a detection
library's image list) fail both exporters' input flattening: the TorchScript exporter takes only
tensors and tuples, lists and dicts of them ("received an input of unsupported type", torchrec#1550),
torch.export only classes registered with pytree. The fix is a wrapper whose forward() takes the
object's tensors as inputs of their own and rebuilds the object around them (a shallow copy of
the example's with each tensor replaced), so the model's code runs unchanged on it. A list,
tuple or dict with objects inside (a detector's list of per-image objects) is rebuilt the same
way. Everything else the object holds (keys, sizes, flags) stays the example's; an object of
settings alone (a dataclass of ints, pytorch#147400) passes no tensor and is the example's whole.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD202", "OD203", "OD204", "OD299")

TENSORS_OF_OBJECTS = '''import copy

import torch


def tensor_paths(value, depth=4, path=()):
    """Where an object's tensors are: attribute names, dict keys and list positions."""
    if isinstance(value, torch.Tensor):
        return [path]
    if depth == 0 or isinstance(value, (str, bytes, torch.nn.Module)):
        return []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    elif hasattr(value, "__dict__"):
        items = vars(value).items()
    else:
        return []
    return [p for key, item in items for p in tensor_paths(item, depth - 1, (*path, key))]


def replaced(value, path, tensor):
    """A copy of `value` with the tensor at `path` replaced; the rest shared with the original."""
    if not path:
        return tensor
    key, rest = path[0], path[1:]
    if isinstance(value, tuple):
        items = list(value)
        items[key] = replaced(value[key], rest, tensor)
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    new = copy.copy(value)
    if isinstance(value, (dict, list)):
        new[key] = replaced(value[key], rest, tensor)
    else:
        vars(new)[key] = replaced(vars(value)[key], rest, tensor)  # frozen dataclasses too
    return new


class TensorsOfObjects(torch.nn.Module):
    """forward() with each object input's tensors as inputs of their own: the object is rebuilt."""

    def __init__(self, model, example, paths):
        super().__init__()
        self.model = model
        self.example = example
        self.paths = paths  # {position: [path, ...]} of the object inputs

    def forward(self, *tensors):
        args, taken = [], 0
        for position, value in enumerate(self.example):
            if position in self.paths:
                for path in self.paths[position]:
                    value = replaced(value, path, tensors[taken])
                    taken += 1
            else:
                value = tensors[taken]
                taken += 1
            args.append(value)
        return self.model(*args)


def leaf_name(path):
    return "_".join(str(key).strip("_") for key in path)


def holds_object(value, depth=4):
    """Whether `value` is, or a list, tuple or dict holds, an object the exporters refuse."""
    if isinstance(value, (torch.Tensor, str, bytes, int, float, bool, type(None))) or depth == 0:
        return False
    if isinstance(value, dict):
        return any(holds_object(item, depth - 1) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_object(item, depth - 1) for item in value)
    return True


# Each input that is an object, or a container with objects inside (a list of per-image
# objects), is passed as its tensors; plain tensors and containers of tensors pass as they are.
objects = {position: tensor_paths(value) for position, value in enumerate(example_inputs)
           if holds_object(value)}
names = list(globals().get("input_names") or [])
flat, flat_names = [], []
for position, value in enumerate(example_inputs):
    name = names[position] if position < len(names) else f"input_{position}"
    if position in objects:
        for path in objects[position]:
            leaf = value
            for key in path:
                leaf = leaf[key] if isinstance(leaf, (dict, list, tuple)) else vars(leaf)[key]
            flat.append(leaf)
            flat_names.append(f"{name}_{leaf_name(path)}")
    else:
        flat.append(value)
        flat_names.append(name)
model = TensorsOfObjects(model, tuple(example_inputs), objects)
example_inputs = tuple(flat)
if names:
    input_names = flat_names
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The wrapper taking object inputs as their tensors, for an export that refused them."""
    objects = ctx.facts_of(Stage.LOAD).get("object_inputs") or []
    if ctx.target_kind != "script" or not objects or finding.stage is not Stage.EXPORT:
        return []
    shown = ", ".join(f"{o['class']} (input {o['position']})" for o in objects[:3])
    settings = all(o.get("settings") for o in objects)
    title = (f"Keep {shown} inside the model as the example's (a wrapper whose forward() takes the tensor "
             "inputs only)" if settings else
             f"Pass the tensors of {shown} as inputs of their own, the object rebuilt inside forward()")
    return [Fix(
        kind="object_inputs",
        title=title,
        snippet=TENSORS_OF_OBJECTS + "torch.onnx.export(model, example_inputs, 'model.onnx', input_names=input_names)\n",
        applicability=Applicability.UNSAFE,
        cost=("the ONNX model has no input for it: its values are the example's (export again for other settings)"
              if settings else
              "the ONNX model takes the object's tensors as separate inputs (named after their attributes); "
              "what else the object holds (keys, sizes, flags) is fixed to the example's"),
        recipe=Recipe("object_inputs", (LoadCode(TENSORS_OF_OBJECTS),), isolated=True),
    )]
