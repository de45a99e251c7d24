"""Rewrite Python control flow on tensor values so that both exporters can capture it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxdoctor.analysis.classify import PACKED_WEIGHTS
from onnxdoctor.analysis.findings import library_frame
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.scripted import script_module
from onnxdoctor.analysis.fixes.shapes import global_pool_fix
from onnxdoctor.analysis.sources import folder_file
from onnxdoctor.branches import edit_text, outermost_right_first, size_int_edit, slice_int_edit
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, ExportCode, PrefixParity, Recipe, UseExporter

CODES = ("OD204", "OD210", "OD299", "OD802", "OD803")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """torch.cond or torch.where in place of a Python branch on a tensor value; for a torch.cond
    the exporter fails on (OD299 too), torch.where over both branches; for a size the trace froze
    (OD802/OD803), the branches that compare sizes read one way."""
    if finding.code in ("OD802", "OD803"):
        # A list or number the trace froze is a size too (Mixtral's `hidden[top_x.tolist()]`).
        values = _tensor_values(finding, ctx)
        # A size int() took out of a traced size after the value route, which covers data values too
        # (`int(lengths.max())`): tried first, as before, within a small check budget.
        return [*([values] if values else []), *_traced_size_ints(finding, ctx), *_size_branches(ctx)]
    where_fix = _cond_as_where(finding, ctx)
    if where_fix is not None:
        return [where_fix]
    if finding.code == "OD299":
        pools = global_pool_fix(finding, ctx)
        return [pools] if pools else []
    if script_module(ctx) is not None or _quantized(ctx):
        # torch.export refused a ScriptModule or quantized modules, not a branch (their families answer)
        return []
    export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT and o.error is not None), None)
    if export is not None and export.error is not None and PACKED_WEIGHTS.search(export.error.all_text()):
        return []  # torch.export stopped at a quantized module's packed weights: there is no branch
    library = _library_branch(finding, ctx)
    if library is not None:
        return [library]
    where = f" at {finding.source}" if finding.source else ""
    values = _tensor_values(finding, ctx)
    pools = global_pool_fix(finding, ctx) if finding.code == "OD210" else None
    scripted = _scripted_owners(finding, ctx)
    # A loop whose steps the data decides, scripted first; not a bounded loop's early exit, whose
    # run to the end (_run_to_the_end) works for any code where scripting needs TorchScript's subset.
    loops = bool(set(_recorded_sites(ctx, "loop_conditions")) - set(_recorded_sites(ctx, "loop_exits")))
    return [
        # a loop whose steps the data decides: the module holding it scripted (an ONNX Loop)
        *([scripted] if scripted and loops else []),
        # a module picked from a ModuleList by a tensor: all run, one selected
        *(_selected_modules(ctx) if finding.code == "OD210" else []),
        *_traced_lengths(finding, ctx),  # recorded len() calls: the one edit that keeps those sizes
        *_traced_slices(finding, ctx),  # slice bounds int() took out of tensors: kept tensors
        *([values] if values else []),
        *_traced_size_ints(finding, ctx),  # a size the batch was frozen at, computed by the graph instead
        *([pools] if pools else []),
        *_every_candidate(finding, ctx),
        *_where_branches(finding, ctx),
        *_forced_branches(finding, ctx),
        # A frozen size comparison can be the whole of an OD210 (yolov5#2558: a grid cached by a
        # dry run is rebuilt only `if self.grid[i].shape[2:4] != x[i].shape[2:4]`).
        *(_size_branches(ctx) if finding.code == "OD210" and not branch_sites(ctx) else []),
        *([scripted] if scripted and not loops else []),
        Fix(
            kind="control_flow",
            title=f"Express the data-dependent branch{where} with tensor ops (torch.where / torch.cond)",
            snippet=(
                "# before:  if x.sum() > 0: return x * 2\n"
                "#          return x - 1\n"
                "return torch.where(x.sum() > 0, x * 2, x - 1)          # both sides are computed\n"
                "# or, when the branches are expensive or differ in shape-free ways:\n"
                "return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))  # ONNX If\n"
            ),
            applicability=Applicability.DISPLAY_ONLY,
            cost="an edit to forward(); onnxdoctor cannot rewrite your code, so this is not verified",
        )
    ]


def _quantized(ctx: FixContext) -> bool:
    return any(o.stage is Stage.LOAD and o.facts.get("quantized_modules") for o in ctx.outcomes)


def _library_branch(finding: Finding, ctx: FixContext) -> Fix | None:
    """The branch is in a model library's code (no line of the user's is involved): say so."""
    export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT and o.error is not None), None)
    where = library_frame(export.error) if export is not None and export.error is not None else None
    if where is None or finding.source:
        return None
    path, _, rest = where.partition(":")
    module = path.removesuffix(".py").replace("/", ".")
    function = rest.partition(", in ")[2].partition(":")[0].strip() or "the_function"
    return Fix(
        kind="control_flow",
        title=f"The data-dependent branch is in library code you cannot edit ({path}:{rest.partition(',')[0]}): "
              "patch that function from your script, or use the library's own export path",
        snippet=(
            f"# {where}\n"
            "# Before exporting, replace the library's function with one that expresses the branch\n"
            "# with torch.cond / torch.where (same signature; copy its body and change the branch):\n"
            f"import {module} as library\n\n\n"
            f"def {function}_exportable(*args, **kwargs):\n"
            "    ...  # the library's body, with `if <tensor condition>:` rewritten as torch.cond\n\n\n"
            f"library.{function} = {function}_exportable\n"
            "# Some libraries ship an ONNX export path or wrapper for such models: prefer it when there is one.\n"
        ),
        applicability=Applicability.DISPLAY_ONLY,
        cost="a patch of library code you maintain yourself; onnxdoctor cannot write it, so it is not verified",
    )


# TracerWarnings of a value taken out of a tensor as a Python number or list, or put back by
# torch.tensor: what `EagerExport.tensor_values` keeps in the graph. A bool (a branch) or an
# int()/index are other conversions it cannot keep.
_NUMBER_ROUND_TRIP = ("a Python number", "a Python integer", "a Python list",
                      "torch.tensor results are registered as constants",
                      "torch.as_tensor results are registered as constants",
                      "torch.from_numpy results are registered as constants")


_WARNED_AT = re.compile(r"\[([^\[\]\s]+\.py:\d+)\]\s*$")


def _tensor_values(finding: Finding, ctx: FixContext) -> Fix | None:
    """OD210 from `.item()` / `.tolist()` / `torch.tensor(...)` (or the size OD802/OD803 found
    frozen at the same time): trace again with the value kept a tensor."""
    if finding.code not in ("OD210", "OD802", "OD803") or ctx.target_kind != "script":
        return None
    export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT and o.facts.get("exporter") == "torchscript"),
                  None)
    texts = (*finding.evidence, *(export.warnings if export is not None else ()))
    warnings = " ".join(texts)
    if finding.op != "aten::item" and not any(text in warnings for text in _NUMBER_ROUND_TRIP):
        return None
    # The line that took the value out (the warning's), not the node that later failed with it.
    taken = next((m.group(1).rpartition("/")[2] for text in texts
                  if any(kind in text for kind in _NUMBER_ROUND_TRIP) and (m := _WARNED_AT.search(text))), None)
    where = f" ({taken or finding.source})" if taken or finding.source else ""
    through = ("build it with torch ops, not a NumPy array (torch.from_numpy(np.array(...)))"
               if "torch.from_numpy results" in warnings else
               "index with the tensor, not its .tolist()" if "a Python list" in warnings
               else "drop .item(), int() and torch.tensor(...) around it")
    return Fix(
        kind="tensor_values",
        title=f"Keep the value a tensor{where}: {through}",
        snippet=(
            "# before:  action = probs.argmax(dim=-1).item()\n"
            "#          return torch.tensor(action)\n"
            "action = probs.argmax(dim=-1)   # a 0-d tensor: the graph computes it from the input\n"
            "return action\n"
            "# likewise torch.arange(n) instead of torch.arange(n.item()) or torch.arange(int(n)),\n"
            "# torch.stack(tags) instead of\n"
            "# torch.tensor([t.item() for t in tags]), and torch.stack([x.shape[0], torch.tensor(k)])\n"
            "# instead of torch.from_numpy(np.array([x.shape[0], k])), and hidden[top_x] instead of\n"
            "# hidden[top_x.tolist()]\n"
        ),
        applicability=Applicability.SAFE,
        cost=("an edit to forward(); checked by tracing it with .item() and .tolist() returning the tensor "
              "and torch.tensor() stacking tensors, at the example and the other inputs"),
        recipe=Recipe("tensor_values", (EagerExport(tensor_values=True), UseExporter("torchscript")), isolated=True),
    )


MAX_FORCED_SITES = 3  # more branches than this are a loop of decisions, not a check that skips work


SCRIPT_PART = """def script_part(root, path):
    \"\"\"Replace the submodule at `path` (a dotted name; '' is the model) with it scripted.\"\"\"
    holder, _, name = path.rpartition(".")
    holder = root.get_submodule(holder)
    setattr(holder, name, torch.jit.script(getattr(holder, name)))
"""


def _scripted_owners(finding: Finding, ctx: FixContext) -> Fix | None:
    """OD210 from branches on tensor values inside modules' code: those modules scripted
    (torch.jit.script keeps a `while` on a residual, a decoder's stop token, an `if` as ONNX
    Loop/If), the rest of the model traced around them, for the TorchScript exporter."""
    if finding.code != "OD210" or ctx.target_kind != "script":
        return None
    owners = _torchscript_export_facts(ctx).get("branch_owners")
    sites = branch_sites(ctx)
    if not sites or not isinstance(owners, dict) or any(f"{n}:{line}" not in owners for n, line in sites):
        return None  # a branch in a module-level function: no module to script
    held = [owners[f"{n}:{line}"] for n, line in sites]
    paths = list(dict.fromkeys(str(p) for h in held for p in h.get("modules") or ()))
    # A module inside one that is scripted anyway is compiled with it.
    paths = [p for p in paths if not any(q != p and (q == "" or p.startswith(q + ".")) for q in paths)]
    if not paths:
        return None
    lines = ["import copy", "", "import torch", "", "", SCRIPT_PART, ""]
    named = ", ".join(f"{n}:{line}" for n, line in sites)
    where = ", ".join(dict.fromkeys(f"{h.get('class')}.{h.get('function')}" for h in held))
    lines.append(f"# {named} ({where}): the tracer records the example's path through a condition on tensor")
    lines.append("# values. Scripted, the module holding it keeps the loop or branch as ONNX Loop/If;")
    lines.append("# the rest of the model is traced as before.")
    lines.append("traced = copy.deepcopy(model)")
    for h in held:
        function = str(h.get("function") or "")
        first = next((str(p) for p in h.get("modules") or () if str(p) in paths), None)
        if function and function != "forward" and first is not None and function.isidentifier():
            # Scripting compiles forward() and what it calls; a method called from outside is compiled too.
            lines.append(f"torch.jit.export(type(traced.get_submodule({first!r})).{function})")
    if paths == [""]:
        lines.append("traced = torch.jit.script(traced)")
    else:
        lines.append(f"for path in {paths!r}:")
        lines.append("    script_part(traced, path)")
        lines.append("traced = torch.jit.trace(traced, tuple(example_inputs), check_trace=False)")
    code = "\n".join(lines) + "\n"
    scripted = "the whole model" if paths == [""] else ", ".join(f"model.{p}" for p in paths)
    return Fix(
        kind="scripted_part",
        title=f"Script {scripted} (torch.jit.script), which holds the condition at {named}, and trace the rest: "
              "the loop or branch stays ONNX control flow",
        snippet=code + "torch.onnx.export(traced, example_inputs, 'model.onnx', dynamo=False)\n",
        applicability=Applicability.SAFE,
        cost=("the scripted module must be scriptable (type annotations, TorchScript's Python subset), which the "
              "check finds out; the TorchScript exporter, which is deprecated"),
        # Exported in place of the model, which stays PyTorch's reference; torch.jit.export marks a
        # method of the class for the process, so a worker of its own.
        recipe=Recipe("scripted_part", (ExportCode(code, program="traced"), UseExporter("torchscript")),
                      isolated=True),
    )


def branch_sites(ctx: FixContext) -> list[tuple[str, int]]:
    """The lines where the TorchScript tracer turned a tensor into a Python bool, in the order it
    met them (file name, line): the sites the worker recorded with the value each reads."""
    return _recorded_sites(ctx, "branch_values")


def _torchscript_export_facts(ctx: FixContext) -> dict[str, Any]:
    """The facts of the run's TorchScript export ({} where it had none)."""
    export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT and o.facts.get("exporter") == "torchscript"),
                  None)
    return export.facts if export is not None else {}


def _recorded_sites(ctx: FixContext, fact: str) -> list[tuple[str, int]]:
    """The `file.py:line` sites a TorchScript export recorded under `fact`, as (file name, line)."""
    return _sites(_torchscript_export_facts(ctx).get(fact) or ())


def _sites(recorded: Any) -> list[tuple[str, int]]:
    return [(name, int(line)) for name, _, line in (str(site).rpartition(":") for site in recorded) if line.isdigit()]


def _forced_branches(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD210 from `if <tensor>:`: the export with each such branch read one way, for every input.

    A check that only skips work (`if not mask.any(): continue` before an expert no token chose)
    gives the same result when the work is done: read as the side doing it, the graph holds that
    side and computes it for any data. A check that guards an error reads the other way. Both are
    tried; the check at other inputs keeps only a reading that holds there.
    """
    sites, exporter = _decided_sites(finding, ctx)
    if not sites:
        return []
    named = ", ".join(f"{name}:{line}" for name, line in sites)
    exits = set(_recorded_sites(ctx, "loop_exits"))
    fixes = []
    values = (True, False)
    if exits and all(site in exits for site in sites):
        # `if finished.all(): break` in a `for step in range(max_len)` loop: never taken, the
        # graph runs every step, and PyTorch's steps are what must match (recipe.PrefixParity).
        fixes.append(_run_to_the_end(named, sites, exporter))
        values = (True,)
    for value in values:
        edit = ("(torch.onnx.is_in_onnx_export() or <condition>)" if value
                else "(not torch.onnx.is_in_onnx_export() and <condition>)")
        fixes.append(Fix(
            kind="forced_branch",
            title=f"Read the tensor condition at {named} as {value} while exporting, so the graph keeps "
                  f"the side it leads to for every input",
            snippet=(
                f"# {named}: the tracer records the example's answer as a constant. Where the other side\n"
                "# gives the same result (a check that only skips work, or guards an error), decide it for\n"
                "# the export:\n"
                f"#   if <condition>:   ->   if {edit}:\n"
                "# e.g. `if not expert_mask.any(): continue` -> "
                + ("`if not (torch.onnx.is_in_onnx_export() or expert_mask.any()): continue`\n" if value else
                   "`if (not torch.onnx.is_in_onnx_export() and bad.any()): raise ...`\n")
            ),
            applicability=Applicability.SAFE,
            cost=("an edit of the condition; checked by exporting with it read as "
                  f"{value} and comparing at the example and at other inputs"),
            recipe=Recipe("forced_branch", (EagerExport(forced_branches=tuple((n, ln, value) for n, ln in sites)),
                                            UseExporter(exporter)), isolated=True),
        ))
    return fixes


def _decided_sites(finding: Finding, ctx: FixContext) -> tuple[list[tuple[str, int]], str]:
    """The branch lines a fix decides for the export, and the exporter it uses: the lines where
    the TorchScript tracer turned a tensor into a bool (OD210), or the line torch.export stopped at
    on a data-dependent value (OD204); none for other findings, other targets, or too many lines."""
    sites, exporter = branch_sites(ctx), "torchscript"
    if finding.code == "OD204":
        guard = ctx.export_facts.get("guard_site")
        sites, exporter = _sites([guard] if guard else []), "dynamo"
    elif finding.code != "OD210":
        sites = []
    if ctx.target_kind != "script" or len(sites) > MAX_FORCED_SITES:
        sites = []
    return sites, exporter


def _where_branches(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD210/OD204 from `if <tensor>:` whose sides only assign names: both sides computed and each
    name selected with torch.where (onnxdoctor/branches.py), the same function for every input."""
    sites, exporter = _decided_sites(finding, ctx)
    if not sites or not ctx.target_path:
        return []
    folder = Path(ctx.target_path).parent
    sources: dict[str, str | None] = {}
    edits: list[tuple[str, int, str]] = []
    for name, line in sites:
        if name not in sources:
            sources[name] = folder_file(folder, name)
        edit = edit_text(sources[name], line) if sources[name] is not None else None
        if edit is not None:
            edits.append((name, line, edit))
    if not edits:
        return []
    named = ", ".join(f"{name}:{line}" for name, line, _ in edits)
    return [Fix(
        kind="where_branch",
        title=f"Compute both sides of the branch at {named} and select with torch.where, so the graph "
              "decides for every input",
        snippet="".join(f"# {name}:{line}\n{edit}" for name, line, edit in edits),
        applicability=Applicability.SAFE,
        cost="both sides are computed on every call; checked by exporting the edited code and comparing "
             "at the example and at other inputs",
        recipe=Recipe("where_branch", (EagerExport(where_branches=tuple((n, ln) for n, ln, _ in edits)),
                                       UseExporter(exporter)), isolated=True),
    )]


def _selected_modules(ctx: FixContext) -> list[Fix]:
    """A module picked from an nn.ModuleList with a tensor (`self.norms[style_id](x)`, a style id
    or a codebook index fed as an input): the tracer reads the index as the example's number with
    no warning, so the graph holds that one module. Exported with every module of the list run
    and the result selected with the tensor (recipe.EagerExport.selected_modules)."""
    sites = ctx.facts_of(Stage.EXPORT).get("module_indices") or []
    if ctx.target_kind != "script" or ctx.exporter != "torchscript" or not sites:
        return []
    named = ", ".join(sites[:3])
    return [Fix(
        kind="selected_modules",
        title=f"Run every module of the list indexed with a tensor at {named} and select the result with "
              "that tensor, so the graph follows the index",
        snippet=(
            f"# {named}: indexing an nn.ModuleList with a tensor reads it as the example's number while\n"
            "# traced. Run every module and select the result with the tensor (outputs of one shape):\n"
            "# before:  x = self.norms[style_id](x)\n"
            "x = torch.stack([norm(x) for norm in self.norms])[style_id.reshape(()).long()]\n"
        ),
        applicability=Applicability.SAFE,
        cost="every module of the list runs for every input (the graph computes them all and keeps one)",
        recipe=Recipe("selected_modules", (EagerExport(selected_modules=True), UseExporter("torchscript")),
                      isolated=True),
    )]


def _traced_lengths(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD210 where forward() took len() of a traced tensor (`points[:len(scores)]`, LoFTR#337):
    the tracer writes the example's length as a number; `tensor.shape[0]` is a size it keeps
    traced. Exported with those len() calls read as shape[0] (branch_select.sized_lengths)."""
    found = _warned_edits(finding, ctx, _LEN_WARNING, length_edit, every=True)
    if found is None:
        return []
    sites, snippet, named = found
    return [Fix(
        kind="traced_length",
        title=f"Read the tensor lengths at {named} as tensor.shape[0] instead of len(tensor), so the "
              "graph computes them for every input",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost="none: shape[0] is the same number, computed by the graph from the tensor it measures",
        recipe=Recipe("traced_length", (EagerExport(len_sites=sites), UseExporter("torchscript")), isolated=True),
    )]


def _traced_slices(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD210 where a slice is bounded by int() of a traced tensor (`masks[..., :int(h)]`, SAM's
    mask post-processing, onnxruntime-inference-examples#341): the tracer writes the example's
    number; the tensor itself as the bound is a traced Slice input. Exported with those int()
    calls giving the tensor (branch_select.slice_bounds)."""
    found = _warned_edits(finding, ctx, _INT_WARNING, slice_int_edit, every=False)
    if found is None:
        return []
    sites, snippet, named = found
    return [Fix(
        kind="traced_slice",
        title=f"Slice with the tensor itself at {named} instead of int(tensor), so the graph takes the "
              "bound from the input",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost="none: the same slice, its bound computed by the graph (an integer tensor)",
        recipe=Recipe("traced_slice", (EagerExport(slice_sites=sites), UseExporter("torchscript")), isolated=True),
    )]


def _traced_size_ints(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD210, or the frozen size it leaves (OD802, OD803), where a size is int() of a traced size
    (`b_merged = int(windows.shape[0] / per_image)`, doctr#1966's window merge, reshaped with it):
    the tracer writes the example's number and the batch is frozen; the size as an integer tensor
    is traced. Exported with those int() calls giving the tensor, truncated as int() does
    (branch_select.traced_sizes)."""
    # A size the batch was frozen at shows as a traced value that differs (OD210) or as a frozen
    # size (a Reshape that fails or differs at another batch: OD802, OD803).
    found = _warned_edits(finding, ctx, _SIZE_WARNING, size_int_edit, every=False, codes=("OD210", "OD802", "OD803"))
    if found is None:
        return []
    sites, snippet, named = found
    return [Fix(
        kind="traced_size_int",
        title=f"Keep the sizes computed at {named} as integer tensors instead of int(), so the graph "
              "computes them for every input",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost=("the graph computes the size from the input's sizes, truncated as int() does; arithmetic on "
              "traced sizes with Python floats runs in float32 there, so a quotient within rounding of an "
              "integer can come out one off: checked at the other sizes"),
        recipe=Recipe("traced_size_int", (EagerExport(size_sites=sites), UseExporter("torchscript")), isolated=True),
    )]


def _warned_edits(finding: Finding, ctx: FixContext, warning: re.Pattern[str],
                  edit: Callable[[str, int], tuple[str, str] | None], *, every: bool,
                  codes: tuple[str, ...] = ("OD210",)) -> tuple[tuple[tuple[str, int], ...], str, str] | None:
    """For a finding of `codes`: the lines the export warned about with `warning` that `edit`
    rewrites, the user's edit of each (the line before, the line after) and the sites named; None
    where there is none, too many, or (`every`) a warned line that `edit` cannot rewrite."""
    if finding.code not in codes or not ctx.target_path:
        return None
    folder = Path(ctx.target_path).parent
    sites: list[tuple[str, int]] = []
    edits: list[str] = []
    for name, line in _warned_sites(ctx, folder, warning):
        source = folder_file(folder, name)
        edited = edit(source, line) if source is not None else None
        if edited is None:
            if every:
                return None
            continue
        sites.append((name, line))
        edits.append(f"# {name}:{line}\n# before: {edited[0].strip()}\n{edited[1].strip()}\n")
    if not sites or len(sites) > MAX_FORCED_SITES:
        return None
    return tuple(sites), "".join(edits), ", ".join(f"{name}:{line}" for name, line in sites)


# torch's TracerWarning for int() of a traced tensor, with the line the worker appends to it.
_INT_WARNING = re.compile(r"Converting a tensor to a Python integer.*\[(?P<path>[^\[\]]+):(?P<line>\d+)\]$",
                          re.DOTALL)
# The same for a size a numpy or math function took first (`int(np.ceil(h / 8) * 8 - h)`).
_SIZE_WARNING = re.compile(r"Converting a tensor to a (?:Python integer|Python float|NumPy array).*"
                           r"\[(?P<path>[^\[\]]+):(?P<line>\d+)\]$", re.DOTALL)
# torch's TracerWarning for len() of a traced tensor, with the line the worker appends to it.
_LEN_WARNING = re.compile(r"Using len to get tensor shape.*\[(?P<path>[^\[\]]+):(?P<line>\d+)\]$", re.DOTALL)


def _warned_sites(ctx: FixContext, folder: Path, warning: re.Pattern[str]) -> list[tuple[str, int]]:
    """(file name, line) of the model folder's lines the TorchScript export warned about with
    `warning`, in the order met."""
    sites: list[tuple[str, int]] = []
    for outcome in ctx.outcomes:
        if outcome.stage is not Stage.EXPORT or outcome.facts.get("exporter") != "torchscript":
            continue
        for text in outcome.warnings:
            match = warning.search(text.strip())
            if match and Path(match["path"]).parent.resolve() == folder.resolve():
                site = (Path(match["path"]).name, int(match["line"]))
                if site not in sites:
                    sites.append(site)
    return sites


def length_edit(source: str, line: int) -> tuple[str, str] | None:
    """(the line, the line with each `len(x)` call on it written `x.shape[0]`), or None where
    the line holds no such call on one line."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    text = source.splitlines()[line - 1] if 0 < line <= len(source.splitlines()) else ""
    calls = outermost_right_first([node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == line
                                   and node.end_lineno == line and isinstance(node.func, ast.Name)
                                   and node.func.id == "len" and len(node.args) == 1])
    if not calls:
        return None
    encoded = text.encode("utf-8")  # ast's offsets count bytes
    edited = encoded
    for call in calls:
        inner = encoded[call.args[0].col_offset:call.args[0].end_col_offset].decode("utf-8")
        inner = inner if isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else f"({inner})"
        edited = edited[:call.col_offset] + f"{inner}.shape[0]".encode() + edited[call.end_col_offset:]
    return text, edited.decode("utf-8")


def _run_to_the_end(named: str, sites: list[tuple[str, int]], exporter: str) -> Fix:
    """The loop's early exit never taken while exporting: the graph runs the loop's every step."""
    return Fix(
        kind="forced_branch",
        title=f"Run the loop to its last step while exporting (the break at {named} is never taken); "
              "cut the outputs to the steps PyTorch would have run",
        snippet=(
            f"# {named}: the tracer records how many steps the example took before the loop stopped\n"
            "# early. Exported with the exit never taken, the graph always runs the loop's full count;\n"
            "# PyTorch's steps are the first ones, and the later steps are the ones it skipped:\n"
            "#   if <finished>: break   ->   if not torch.onnx.is_in_onnx_export() and <finished>: break\n"
            "# then, after running the ONNX model, cut the outputs where PyTorch's loop would have\n"
            "# stopped (a decoder: each sequence at its end token).\n"
        ),
        # The outputs are longer than PyTorch's: the caller must cut them, so the user decides.
        applicability=Applicability.UNSAFE,
        cost=("the ONNX model always runs the loop's maximum number of steps and its outputs are that long; "
              "checked by comparing PyTorch's steps at the example and at other inputs"),
        recipe=Recipe("run_to_the_end", (EagerExport(forced_branches=tuple((n, ln, False) for n, ln in sites)),
                                         UseExporter(exporter), PrefixParity()), isolated=True),
    )


# `for expert_idx in expert_hit:`: the line torch.export stopped at loops over a tensor.
_TENSOR_LOOP = re.compile(r"^for\s+.+\s+in\s+(?!range\()")


def _every_candidate(finding: Finding, ctx: FixContext) -> list[Fix]:
    """OD204 at a loop over a tensor whose length the data decides (the rows of `nonzero()`): the
    export visiting every position nonzero() was asked about (recipe.EagerExport.every_candidate)."""
    code = str(ctx.export_facts.get("guard_code") or "")
    if finding.code != "OD204" or ctx.target_kind != "script" or not _TENSOR_LOOP.match(code):
        return []
    where = f" at {ctx.export_facts.get('guard_site')}" if ctx.export_facts.get("guard_site") else ""
    return [Fix(
        kind="every_candidate",
        title=f"Loop over every candidate{where} instead of the ones nonzero() found (their count is data)",
        snippet=(
            f"# {code}\n"
            "# torch.export cannot loop over a count the data decides. Where the loop body adds nothing\n"
            "# for a candidate nonzero() would skip (an expert no token chose selects no tokens), visit\n"
            "# them all (transformers#40114):\n"
            "# before:  expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()\n"
            "#          for expert_idx in expert_hit:\n"
            "for expert_idx in range(self.num_experts):\n"
            "    ...   # the same body\n"
        ),
        applicability=Applicability.SAFE,
        cost=("an edit of the loop; the graph computes the body for every candidate (for a mixture of "
              "experts, each expert on the tokens routed to it: no extra rows); checked at the example "
              "and at other inputs"),
        recipe=Recipe("every_candidate", (EagerExport(every_candidate=True), UseExporter("dynamo")), isolated=True),
    )]


# More size comparisons than this on the traced path and reading them all one way is no longer
# one edit the user would make.
MAX_SIZE_SITES = 4


def _size_branches(ctx: FixContext) -> list[Fix]:
    """A size the TorchScript trace froze where forward() branches on a comparison of sizes (`if
    seq_len != d_seq_len * ds: pad`, icefall#857): the export with each such branch read one way.

    The trace keeps the side the example's size took: padding by zero where the example needed
    none, and then no pad at all in the graph. Read as the side that does the work, the graph
    computes it for every size (a pad of zero where none is needed); the check at other sizes
    keeps only a reading that holds there."""
    sites = _recorded_sites(ctx, "size_branches")
    if ctx.target_kind != "script" or not sites or len(sites) > MAX_SIZE_SITES:
        return []
    named = ", ".join(f"{name}:{line}" for name, line in sites)
    return [Fix(
        kind="forced_branch",
        title=f"Read the size comparison at {named} as {value} while exporting, so the graph keeps the "
              "side it leads to for every size",
        snippet=(
            f"# {named}: the tracer records the example's answer to a comparison of sizes as a\n"
            "# constant, and with it the side the example's size took. Where the other side gives the\n"
            "# same result (a pad of zero, a reshape that changes nothing), decide it for the export:\n"
            f"#   if <sizes differ>:   ->   if {'torch.onnx.is_in_onnx_export() or <sizes differ>' if value else 'not torch.onnx.is_in_onnx_export() and <sizes differ>'}:\n"
        ),
        applicability=Applicability.SAFE,
        cost=f"an edit of the condition; checked by exporting with it read as {value} and comparing at other sizes",
        recipe=Recipe("forced_branch", (EagerExport(forced_branches=tuple((n, ln, value) for n, ln in sites)),
                                        UseExporter("torchscript")), isolated=True),
    ) for value in (True, False)]


def _cond_as_where(finding: Finding, ctx: FixContext) -> Fix | None:
    """torch.cond that the exporter fails on: both branches computed, each output picked with
    torch.where (the same numbers when both branches run on the operands)."""
    text = ctx.export_error
    if ctx.target_kind != "script" or not (finding.op in ("higher_order::cond", "torch.cond") or "torch.cond" in text
                                           or "higher_order.cond" in text or "cond_op" in text):
        return None
    return Fix(
        kind="control_flow",
        title="Compute both branches of torch.cond and pick with torch.where (no If in the graph)",
        snippet=(
            "# before:  return torch.cond(pred, true_fn, false_fn, (x,))\n"
            "return torch.where(pred, true_fn(x), false_fn(x))   # both branches run; same-shaped outputs\n"
        ),
        applicability=Applicability.SAFE,
        cost=("both branches run on every call; only for branches that run on every input and return "
              "tensors of the same shapes"),
        recipe=Recipe("cond_as_where", (EagerExport(cond_as_where=True),), isolated=True),
    )
