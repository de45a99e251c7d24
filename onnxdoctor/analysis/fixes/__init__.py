"""Fix families, one module each; `propose_fixes` asks every family that answers a finding's code.

A fix carries a snippet tailored to the finding and a typed `Recipe` (onnxdoctor.recipe) the worker
applies to verify it. The code a recipe runs is the snippet itself (or its registration part), so
what is verified is what the user is shown. Recipes marked `isolated` change process-wide state
(torch's symbolic registry, the model's mode) and are verified in a fresh worker.

`chain` joins fixes found one after another (the second answers what the first left) into one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.fixes import (
    affine_norms,
    aliased_inputs,
    array_inputs,
    aten_fallback,
    aten_kernel,
    autograd,
    batch_axis,
    causal_hint,
    complex_outputs,
    constant_writes,
    contrib_ops,
    control_flow,
    conv_transpose,
    custom_domain,
    custom_op,
    decompose,
    dense_attention,
    dict_inputs,
    distribution_checks,
    down_converted,
    dynamic_shapes,
    entry_method,
    eval_mode,
    example_channels,
    export_args,
    export_branch,
    exporter,
    fake_kernel,
    fake_quantized,
    frozen_weights,
    function_kernel,
    generators,
    grouped_conv,
    half,
    if_branches,
    inference_noops,
    inner_module,
    inplace_operators,
    llm_cache,
    name_lists,
    named_inputs,
    noise_inputs,
    norm_rank,
    object_inputs,
    onnx_file,
    opset,
    optimizer,
    ort_options,
    output_dtype,
    output_names,
    outputs,
    packed,
    per_sample,
    perms,
    quantized,
    recurrent,
    renormed_embeddings,
    reparametrized,
    rewrite,
    runtime,
    scalar_functions,
    scripted,
    shape_annotations,
    shapes,
    size_multiple,
    sized_pooling,
    sparse_dense,
    split_sizes,
    state_io,
    strided_views,
    target_gaps,
    tensor_data,
    traced_sizes,
    translation,
    tuple_inputs,
    unbatched_pools,
    unordered,
    unset_attributes,
)
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, ExportCode, Recipe, UseExporter

FAMILIES = (
    eval_mode, name_lists, aliased_inputs, array_inputs, object_inputs, inner_module, entry_method, named_inputs, export_args, frozen_weights, inplace_operators, affine_norms, renormed_embeddings, reparametrized, dynamic_shapes, distribution_checks, per_sample, control_flow, causal_hint, autograd, fake_kernel, decompose, rewrite, custom_op, custom_domain, opset, onnx_file,
    contrib_ops, scripted, down_converted, inference_noops, ort_options, optimizer, quantized, recurrent, packed, conv_transpose, output_dtype,
    sized_pooling,
    unbatched_pools,
    split_sizes, if_branches, perms, shape_annotations, output_names,  # ONNX-level rewrites that keep the exporter: before another exporter
    noise_inputs,  # a random op's mismatch: its draws as inputs, before another exporter's random op
    exporter, runtime,
    aten_fallback, outputs, llm_cache, target_gaps, shapes, half, function_kernel, translation, scalar_functions, generators,
    sparse_dense, tensor_data, constant_writes, grouped_conv, dense_attention, complex_outputs, unordered,
    traced_sizes,
    strided_views,
    fake_quantized,
    export_branch,  # the branch the user wrote for the export, replaced: after the fixes that keep it
    tuple_inputs,
    dict_inputs,
    batch_axis,
    example_channels,
    norm_rank,  # after batch_axis: an unbatched example reads one axis short too
    size_multiple,
    unset_attributes,
    aten_kernel,  # last: a Python-kernel bridge is what is left when nothing else works
)

__all__ = ["FAMILIES", "FixContext", "chain", "chainable", "propose_fixes"]


def propose_fixes(finding: Finding, context: dict[str, Any]) -> list[Fix]:
    """Candidate fixes for one finding, best first (before verification reorders them)."""
    ctx = FixContext.build(finding, context)
    if finding.code in state_io.CODES and ctx.parity_facts.get("stateful"):
        # Outputs that differ because forward() keeps state between calls: no change to an op,
        # an opset or the exporter makes a graph keep state, and each would fail the same check.
        return state_io.propose(finding, ctx)
    fixes: list[Fix] = []
    for family in FAMILIES:
        if finding.code in family.CODES:
            fixes.extend(family.propose(finding, ctx))
    return _unique(fixes)


def notes_for(finding: Finding, context: dict[str, Any]) -> tuple[str, ...]:
    """Plain statements about popular advice that does not apply here."""
    ctx = FixContext.build(finding, context)
    notes: list[str] = []
    for family in FAMILIES:
        if finding.code in family.CODES and hasattr(family, "notes"):
            notes.extend(n for n in family.notes(finding, ctx) if n not in notes)
    return tuple(notes)


def with_fixes(finding: Finding, context: dict[str, Any]) -> Finding:
    """The finding with its proposed fixes and notes attached."""
    return replace(finding, fixes=tuple(propose_fixes(finding, context)), notes=notes_for(finding, context))


def _unique(fixes: list[Fix]) -> list[Fix]:
    seen: set[str] = set()
    result = []
    for fix in fixes:
        key = fix.kind + "|" + (fix.recipe.key() if fix.recipe else "") + fix.title
        if key not in seen:
            seen.add(key)
            result.append(fix)
    return result


def chainable(first: Fix, then: Fix) -> bool:
    """Whether `then` can be applied on top of `first` as one fix.

    A fix adds something the chain does not already do (a cast of a second op, not the same
    cast again); two fixes that each build the exported program
    themselves do not compose (the second would start again from the model), unless the later one
    wraps what the earlier built (`ExportCode.nests`, call rewrites); and a fix that
    picks the other exporter would void the earlier steps made for one exporter (export code,
    custom opsets, dynamic_shapes). Model changes, file rewrites and kernels work with either.
    """
    if first.recipe is None or then.recipe is None:
        return False
    chosen, switched = first.recipe.first(UseExporter), then.recipe.first(UseExporter)
    if first.recipe.exporter_bound and chosen and switched and chosen != switched:
        return False
    if all(_contained(step, first.recipe) for step in then.recipe.steps):
        return False
    # Only a wrapper that nests what an earlier step built under its name (call rewrites) composes
    # with it; any other program would be exported in its place.
    built = [c for r in (first.recipe, then.recipe) for c in r.all(ExportCode) if c.program]
    return all(c.nests and c.program == built[0].program for c in built[1:])


def _contained(step: Any, recipe: Recipe) -> bool:
    """Whether the recipe already does what the step does (export changes merge into one step, so
    a step whose changes the recipe's EagerExport has adds nothing)."""
    if step in recipe.steps:
        return True
    eager = recipe.first(EagerExport)
    return isinstance(step, EagerExport) and eager is not None and eager.merged(step) == eager


def chain(fixes: list[Fix]) -> Fix:
    """Fixes found one after another, as one fix.

    The recipe keeps the order they were found in (a later fix's choice of exporter or opset
    was made with the earlier ones applied). The snippet shows the steps in the order a user
    applies them: changes to the model first, then export settings, then file rewrites, then
    runtime kernels. A fix whose every step a later one chooses again (an exporter switched back)
    is left out; what is left of one fix is that fix.
    """
    fixes = [fix for n, fix in enumerate(fixes)
             if not (fix.recipe and any(later.recipe and fix.recipe.superseded_by(later.recipe)
                                        for later in fixes[n + 1:]))]
    if len(fixes) == 1:
        return fixes[0]
    recipe = fixes[0].recipe
    for fix in fixes[1:]:
        recipe = recipe.then(fix.recipe) if recipe and fix.recipe else recipe
    shown = sorted(fixes, key=lambda fix: fix.recipe.acts_on if fix.recipe else 1)
    steps = "\n".join(
        f"# Step {n} of {len(shown)}: {fix.title}\n{fix.snippet.rstrip()}\n" for n, fix in enumerate(shown, 1)
    )
    order = [Applicability.SAFE, Applicability.UNSAFE, Applicability.DISPLAY_ONLY]
    return Fix(
        kind="chain",
        title="; then ".join(f.title for f in shown),
        snippet=steps,
        applicability=max((f.applicability for f in fixes), key=order.index),
        cost="; ".join(dict.fromkeys(f.cost for f in fixes if f.cost)),
        recipe=recipe,
        # A chain continued from a chain lists the inner steps, not "chain".
        steps=tuple(kind for f in fixes for kind in (f.steps or (f.kind,))),
    )
