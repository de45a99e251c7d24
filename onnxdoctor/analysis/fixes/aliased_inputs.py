"""An example that passes one tensor in several places (pytorch/pytorch#139646).

torch.export takes a tensor that appears at several inputs for one input: the graph reads it from
one of them (the last, in torch 2.13), so the export matches at the example and computes
something else wherever those inputs differ. Distinct example tensors (a clone for every repeat)
give each input its own place in the graph. Verified at the script's other inputs, where they
differ.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD601", "OD603", "OD802", "OD803", "OD210")

CLONES = """import torch

# One tensor passed as several inputs is one input to torch.export: give each its own copy
# (a tensor whose storage an earlier input already holds is cloned).
_seen = set()


def _distinct(value):
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage().data_ptr()
        if storage in _seen:
            return value.clone()
        _seen.add(storage)
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_distinct(item) for item in value)
    if isinstance(value, dict):
        return {key: _distinct(item) for key, item in value.items()}
    return value


example_inputs = tuple(_distinct(value) for value in example_inputs)
"""


def _groups(ctx: FixContext) -> list[list[int]]:
    return [g for g in ctx.facts_of(Stage.LOAD).get("aliased_inputs") or [] if isinstance(g, list)]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Which example inputs are one tensor (the TorchScript tracer keeps them apart)."""
    if ctx.exporter != "dynamo":
        return []
    return [f"the example passes one tensor as inputs {', '.join(map(str, group))} (tensor positions): "
            "torch.export takes them for one input, so the graph reads only one of them"
            for group in _groups(ctx)]


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Distinct example tensors, where the example passes one tensor in several places."""
    if ctx.target_kind != "script" or ctx.exporter != "dynamo" or not _groups(ctx):
        return []
    return [Fix(
        kind="distinct_inputs",
        title="Pass a distinct tensor for every input of the example (one tensor in several places is "
              "one input to torch.export)",
        snippet=CLONES,
        applicability=Applicability.SAFE,
        cost="none at run time: the exported graph reads each input from its own place",
        recipe=Recipe("distinct_inputs", (LoadCode(CLONES),), isolated=True),
    )]
