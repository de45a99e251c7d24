"""Fix recipes: the typed steps the worker applies to verify a fix (standard library only).

A fix family (onnxdoctor.analysis.fixes) builds a `Recipe` from steps; the worker pattern-matches
each step in the stage it belongs to (LOAD, EXPORT, ORT_LOAD). A new kind of fix step is one
dataclass here plus one `case` in the worker. Recipes cross the process boundary as JSON: every
step is tagged with its class name, and `Recipe.from_dict` accepts only the classes listed here.

Chaining two fixes (an opset change, then a cast) is `first.then(second)`: the steps of both,
with the later recipe's choice winning where both pick the same setting (exporter, opset), and
the export changes of both (EagerExport) merged into one step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

# ---- ONNX file rewrites (after the export, or at LOAD for a .onnx target) ----------------------


@dataclass(frozen=True)
class SetOpset:
    """Change the default-domain opset import only (valid when no op changes meaning in between)."""

    opset: int


@dataclass(frozen=True)
class ConvertOpset:
    """onnx's version converter to another opset."""

    opset: int


@dataclass(frozen=True)
class ExpandFunction:
    """Replace every node of a function op by the standard ops of its schema's body.

    `for_target`: then expand, the same way, every function op of the result that this target's
    table lacks (HardSwish becomes HardSigmoid and Mul; for WebGPU, HardSigmoid then goes too).
    """

    op: str
    for_target: str = ""


@dataclass(frozen=True)
class CastAround:
    """Cast the inputs of every `op` node to `to` and its outputs back (a missing type kernel);
    `integers`: integer data too, rounded back (onnxkit.transforms.cast_around)."""

    op: str
    to: str
    integers: bool = False


@dataclass(frozen=True)
class PromoteInputs:
    """Cast the inputs of the node named `node` (with `every`, of every node like it) to the type
    PyTorch promotes them to, per type parameter (a Concat the dynamo exporter writes for
    `torch.stack` of mixed dtypes, int32 Slice bounds; onnxkit.transforms.promote_inputs)."""

    node: str
    every: bool = False


@dataclass(frozen=True)
class SetIrVersion:
    """Stamp the model with an older IR version, when its opset imports allow it."""

    ir_version: int


@dataclass(frozen=True)
class ToFloat32:
    """Compute in float32 where the graph computes in `source` ("double", "float16", "bfloat16");
    its inputs and outputs of that type keep it."""

    source: str = "double"


@dataclass(frozen=True)
class CastOutputs:
    """Cast graph outputs to the dtypes PyTorch returns: (output index, numpy dtype name) pairs
    (onnxkit.transforms.cast_outputs)."""

    casts: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class SplitSizesAsTensor:
    """Give SplitToSequence its split sizes as the 1-D tensor its schema takes where the graph
    built them as a sequence (onnxkit.transforms.split_sizes_as_tensor)."""


@dataclass(frozen=True)
class NonNegativePerms:
    """Write a Transpose's negative `perm` entries as the axes they count from the end
    (onnxkit.transforms.non_negative_perms)."""


@dataclass(frozen=True)
class AlignIfBranches:
    """Cast the outputs of If branches whose element types differ to `to` (a numpy dtype name),
    and declare the If's outputs so (onnxkit.transforms.align_if_branches)."""

    to: str


@dataclass(frozen=True)
class DropShapeAnnotations:
    """Drop the shapes the exporter declared for intermediate values (graph and subgraphs'
    value_info), so ONNX Runtime derives them from the ops (onnxkit.transforms.drop_shape_annotations)."""


@dataclass(frozen=True)
class NameOutputs:
    """Give the graph's outputs these names after the export, renaming any other value that has
    one of them first (onnxkit.transforms.name_outputs). A script exported with this rewrite is
    exported without its `output_names`: the dynamo exporter renames an output in place, and an
    internal value that already had the name (an `nn.Embedding`'s output, `embedding`) leaves the
    graph with two producers of it."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class PerSampleLoop:
    """Run a graph exported at one sample once per sample: an ONNX Loop over dim 0 of the graph
    inputs at `inputs` (positions among its inputs), whose body is the graph, with each output
    stacked along dim 0 again (onnxkit.transforms.per_sample_loop)."""

    inputs: tuple[int, ...]


@dataclass(frozen=True)
class FoldConstants:
    """Compute what the graph computes from constants alone, and store it as initializers."""


Transform = (SetOpset | ConvertOpset | ExpandFunction | CastAround | PromoteInputs | SetIrVersion | ToFloat32
             | FoldConstants | CastOutputs | SplitSizesAsTensor | AlignIfBranches | NonNegativePerms
             | DropShapeAnnotations | NameOutputs | PerSampleLoop)


@dataclass(frozen=True)
class Reference:
    """What a rewritten .onnx file is compared with when there is no PyTorch model.

    `opset`: the original model, run by ONNX Runtime at that opset; otherwise onnx's reference
    evaluator runs the original. `required`: no comparison means the fix is not verified.
    """

    opset: int | None = None
    required: bool = False


# ---- steps ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalMode:
    """`model.eval()` before the reference outputs and the export."""


@dataclass(frozen=True)
class ArraysAsTensors:
    """NumPy arrays and scalars among the script's example inputs made tensors at LOAD."""


@dataclass(frozen=True)
class ScriptingOff:
    """TorchScript compilation off from before the script is imported, as PYTORCH_JIT=0 leaves
    it: torch.jit.script and @torch.jit.script_method return the Python code they are given, and
    torch.jit.ScriptModule is a plain nn.Module, so the exporters trace through every part."""


@dataclass(frozen=True)
class LoadCode:
    """Code run at LOAD, before the reference outputs; the `model` it leaves is the one exported."""

    code: str


@dataclass(frozen=True)
class UseExporter:
    """Export with this exporter: "dynamo" or "torchscript"."""

    exporter: str


@dataclass(frozen=True)
class UseOpset:
    """Export at this opset."""

    opset: int


@dataclass(frozen=True)
class ExportCode:
    """Code run before the export, as the user would paste it into their script.

    `program`: the variable holding an ExportedProgram (or a wrapper of the model) the code
    built, exported instead of the model; `translation_table`: the variable holding a dynamo
    custom_translation_table; `nests`: the code wraps what an earlier step of the recipe built
    under the same `program` name, given to it by that name (call rewrites of two ops compose,
    one wrapper inside the other), instead of starting again from the model.
    """

    code: str
    program: str = ""
    translation_table: str = ""
    nests: bool = False


@dataclass(frozen=True)
class EagerExport:
    """Export the eager code instead of the custom nodes it is written as, for the export only.

    `functions`: autograd.Functions (`module:Qualname`; the script's own by name) exported without
    their `symbolic`, so the exporter traces `forward`; `not_in_export`: torch.onnx.is_in_onnx_export()
    reads false, so forward() takes its eager branch; `tensor_values`: `Tensor.item()` gives the
    0-d tensor itself, `Tensor.tolist()` the tensor and `torch.tensor()` of tensors stacks them, so a value that forward() takes
    out of a tensor and puts back stays in the traced graph instead of becoming a constant. All
    are undone when the export returns. `traced_helpers`: functions under
    @torch.jit.script_if_tracing run as Python under the tracer instead of being scripted;
    `global_pools`: an avg/max pool whose kernel covers the whole input (`F.avg_pool2d(x,
    x.size()[2:])`, GeM) is a mean/amax over those dims, which follows the input's size;
    `cond_as_where`: torch.cond computes both branches and selects with torch.where;
    `forced_branches`: (file name, line, value): a tensor's truth value asked on that line of that
    file (`if mask.any():`) reads `value` without looking at the tensor, so the export keeps the
    side it leads to whatever the example's data; `tensor_outputs`: `Tensor.numpy()` gives the
    tensor itself, so results forward() hands over as numpy arrays stay the graph's outputs;
    `seeded_noise`: random draws given an explicit `generator=` are, for "constant", drawn by
    PyTorch with the tracer looking away (the generator's numbers become a constant of the
    graph), and for "unseeded", drawn without the generator (the graph's own random op);
    `every_candidate`: a loop over the rows of `nonzero()` (`for i in hits.nonzero():`) visits
    every position of the tensor nonzero() was asked about, each row a constant, so the graph
    holds the loop body for all of them; `dense_sparse`: sparse tensors are built and used dense
    (`torch.sparse_coo_tensor` sums its values into a zero tensor, the sparse products are the
    dense ones), since ONNX has no sparse tensors; `symbolic_sizes`: under torch.export, a tensor
    built from sizes read off a shape (`torch.as_tensor([(h, w), ...])`) is stacked from those
    sizes, so it stays computed from the input, and iterating it (or `tolist()`) gives the sizes
    back; `torch.linspace` with a symbolic count is `start + arange(n) * step`; `traced_data`:
    under the TorchScript tracer, reading `x.data` is a traced detach and assigning it makes `x`
    stand for the assigned value in the graph, where the tracer records neither;
    `unfolded_convs`: a 2-D convolution or transposed convolution whose `groups` is a symbolic
    size (StyleGAN2's per-sample weights, groups=batch) is computed as unfold/fold and a grouped
    einsum, since ONNX's Conv takes its group count as a fixed attribute; `dense_attention`:
    flex_attention is computed as dense attention (its score_mod and mask_mod applied to the whole
    score matrix) and create_block_mask keeps only the mask function, since neither exporter
    converts the flex_attention operator or the block mask's construction; `affine_norms`: an
    instance or batch norm given no weight or bias gets ones and zeros as long as the input's
    channel dim, computed from its shape, since the TorchScript symbolics build them as
    constants and refuse a channel count the trace does not know; `where_branches`: (file name,
    line) of `if <tensor>:` statements whose sides only assign names, run with both sides computed
    and each name selected with torch.where (onnxdoctor/branches.py), so the graph holds the
    selection instead of the side the example took; `len_sites`: (file name, line) of
    `len(tensor)` calls, run as `tensor.shape[0]`, which the TorchScript tracer keeps as a traced
    size where it records len() as the example's number; `slice_sites`: (file name, line) of
    slices bounded by `int(tensor)` (`masks[..., :int(h)]`), run with the tensor itself as the
    bound, which the tracer keeps as a traced Slice input; `size_sites`: (file name, line) of
    `int(x)` calls that are a size (the value assigned to a name or returned, an argument of view/reshape/...:
    onnxdoctor/branches.size_int_calls), run with x as an integer tensor, a traced size;
    `int_sizes`: a 0-d tensor given to
    torch.nn.functional where it takes an int or a tuple of ints (`F.unfold(x, k, stride=s)` with
    `s` computed from sizes, a 0-d tensor under the TorchScript tracer, which torch's argument
    parsing iterates) is read as the Python int it holds, a constant of the graph as the user's
    `int(s)` would be; `frozen_weights`: every tensor the model
    object reaches that requires grad (the parameters of modules kept in a plain list or on a
    plain object, which no `nn.Module` registers) has requires_grad off, since the TorchScript
    tracer refuses to write a tensor that requires grad as a constant; `inplace_operators`: the
    augmented bitwise operators (`mask |= hits`, `&=`, `^=`, `<<=`, `>>=`), which the TorchScript
    exporter has no symbolic for (aten::__ior_), are computed out of place and copied into the
    tensor (`copy_`, which the exporter follows), so a view or another name sees the result too;
    `cloned_constants`: under the TorchScript tracer, a tensor built from Python data
    (`torch.tensor`, `torch.as_tensor`, `torch.from_numpy`) is a clone of what they build, so
    writes into it in place change the clone and not the graph's constant, which the tracer holds
    by reference (and the graph would apply the writes to it a second time); `torch_symbolics`:
    torch ops (`aten::grid_sampler`) whose symbolic the script registered with
    `register_custom_op_symbolic` are exported by the exporter's own symbolic instead (mmcv's
    extra symbolics write them as nodes of a domain only mmcv's runtime library has);
    `selected_modules`: an nn.ModuleList indexed with a one-element tensor while traced
    (`self.norms[style_id](x)`) gives a module that runs every module of the list and selects the
    result with the tensor (a Gather in the graph), where the tracer would read the index as the
    example's number; `strided_views`: under the TorchScript tracer, a contiguous tensor's
    `stride()` is computed from its traced sizes and `as_strided` is a gather from the flattened
    storage the tensor views (its base), so windows built from the input's strides follow its size
    and windows that reach past a slice read what eager reads; `fake_quantized`: under the
    TorchScript tracer, `torch.quantize_per_tensor`/`quantize_per_channel` give the float values
    they quantize to (QuantizeLinear/DequantizeLinear) and `dequantize` of a float tensor is that
    tensor, so what forward() does to a quantized tensor (indexing it) runs on its values;
    `unbatched_pools`: under the TorchScript tracer, a pooling functional given an unbatched input
    (max_pool2d of (C, H, W)) pools it with a batch axis of 1, which the exporter writes as an ONNX
    pool of the rank it is for, and takes the axis off again.
    """

    functions: tuple[str, ...] = ()
    not_in_export: bool = False
    tensor_values: bool = False
    traced_helpers: bool = False
    global_pools: bool = False
    cond_as_where: bool = False
    forced_branches: tuple[tuple[str, int, bool], ...] = ()
    tensor_outputs: bool = False
    seeded_noise: str = ""
    every_candidate: bool = False
    dense_sparse: bool = False
    symbolic_sizes: bool = False
    traced_data: bool = False
    unfolded_convs: bool = False
    dense_attention: bool = False
    affine_norms: bool = False
    where_branches: tuple[tuple[str, int], ...] = ()
    len_sites: tuple[tuple[str, int], ...] = ()
    slice_sites: tuple[tuple[str, int], ...] = ()
    size_sites: tuple[tuple[str, int], ...] = ()
    int_sizes: bool = False
    frozen_weights: bool = False
    inplace_operators: bool = False
    cloned_constants: bool = False
    torch_symbolics: tuple[str, ...] = ()
    selected_modules: bool = False
    strided_views: bool = False
    fake_quantized: bool = False
    unbatched_pools: bool = False

    def merged(self, later: EagerExport) -> EagerExport:
        """Both sets of changes in one export: a switch either turns on is on, the listed sites
        and functions of both are kept (this one's first), and the later noise mode wins.

        The worker applies one EagerExport per export, so a chain whose steps each change the
        export (a traced size, then a branch kept as a selection) needs them merged, not queued.
        """
        values: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(later, f.name)
            if f.name == "forced_branches":
                # One value per site: the later fix's reading of a branch replaces this one's.
                sites = {(name, line) for name, line, _value in theirs}
                values[f.name] = (*(b for b in mine if (b[0], b[1]) not in sites), *theirs)
            elif isinstance(mine, tuple):
                values[f.name] = (*mine, *(v for v in theirs if v not in mine))
            elif isinstance(mine, bool):
                values[f.name] = mine or theirs
            else:
                values[f.name] = theirs or mine
        return EagerExport(**values)


@dataclass(frozen=True)
class PerSample:
    """Export the model at one sample: the arguments at `inputs` (forward()'s positions) cut to
    their first row along dim 0, and that dim taken out of the declared dynamic dims, for the
    export only; PARITY and SHAPES still run at the script's batch sizes. Paired with
    RewriteOnnx(PerSampleLoop), which runs the file once per sample."""

    inputs: tuple[int, ...]


@dataclass(frozen=True)
class CustomOpsets:
    """TorchScript's `custom_opsets`: the version of each custom domain the symbolics emit."""

    domains: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class OperatorExportType:
    """TorchScript's `operator_export_type`, by its name in torch.onnx.OperatorExportTypes."""

    name: str


@dataclass(frozen=True)
class Unoptimized:
    """The dynamo exporter's `optimize=False`: the ONNX graph as translated, without the constant
    folding and simplification torch.onnx runs on it (ONNX Runtime still optimizes at load)."""


@dataclass(frozen=True)
class StrictCapture:
    """The dynamo exporter given the program of `torch.export.export(..., strict=True)`: TorchDynamo
    traces forward's bytecode, so `len(x)` and Python arithmetic on sizes stay symbolic where the
    exporter's default capture (non-strict) asks Python for an int and fixes the dim."""


@dataclass(frozen=True)
class DynamicShapes:
    """Corrections to the script's dynamic_shapes.

    `rename`: top-level keys renamed to forward()'s argument names; `pack`: the name of a
    `*args` parameter whose spec is a tuple of the given keys' specs, in their order; `missing`:
    arguments the spec left out, added as static (None); `suggested`: torch's own Dim lines.
    """

    rename: tuple[tuple[str, str], ...] = ()
    suggested: tuple[str, ...] = ()
    pack: str = ""
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeclareDynamic:
    """Export with these dimensions declared dynamic, and check the model at these sizes.

    `dims`: (input name, dim, dim name, min, max) rows, a `dynamic_shapes` spec of named Dims for
    the dynamo exporter, `dynamic_axes` for TorchScript; `sizes`: the size sets ({input: shape})
    the SHAPES stage checks the fixed model at (the main run's), each as (name, shape) pairs.
    """

    dims: tuple[tuple[Any, ...], ...] = ()
    sizes: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...] = ()
    # The model's input names in order (TorchScript's input_names, when the script sets none).
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class RewriteOnnx:
    """Rewrite the exported (or given) file before checking and running it."""

    transform: Transform
    reference: Reference | None = None


def ordered_rewrites(rewrites: list[RewriteOnnx]) -> list[RewriteOnnx]:
    """A fix's file rewrites in the order they apply: running the graph per sample moves its
    nodes into a Loop body, where the other rewrites (which walk the graph's own nodes) would not
    find them, so PerSampleLoop goes last."""
    return sorted(rewrites, key=lambda r: isinstance(r.transform, PerSampleLoop))


@dataclass(frozen=True)
class RuntimeKernels:
    """Kernels ONNX Runtime needs for custom domains.

    `libraries`: shared libraries to register; `python`: code registering onnxruntime-extensions
    Python kernels (run once per process: that table is process-wide); `extensions`: register
    onnxruntime-extensions' own library.
    """

    libraries: tuple[str, ...] = ()
    python: str = ""
    extensions: bool = False


@dataclass(frozen=True)
class QuantizeOnnx:
    """Quantize the exported float model with ONNX Runtime's quantization tools, and compare it
    with the (quantized) PyTorch model at a quantization tolerance.

    `method`: "dynamic" runs `onnxruntime.quantization.quantize_dynamic` on the exported float
    model (for dynamically quantized PyTorch models); "grid" quantizes nothing more: the export
    already rounds activations to the PyTorch model's own grids (QuantizeLinear/DequantizeLinear,
    for statically quantized ones). `weight_type`: onnxruntime.quantization.QuantType's name;
    `reduce_range`: 7-bit weights, as PyTorch's fbgemm backend uses (8-bit ones saturate on CPUs
    without VNNI); `tolerance`: the largest difference allowed, as a fraction of the largest output
    magnitude (the two models round their activations separately); `op_types`: the ONNX ops
    quantize_dynamic may quantize (those of the PyTorch model's quantized modules; empty: its
    default set).
    """

    method: str = "dynamic"
    weight_type: str = "QInt8"
    reduce_range: bool = True
    tolerance: float = 0.05
    op_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionConfig:
    """ONNX Runtime session configuration entries (`SessionOptions.add_session_config_entry`)
    the model is run with: what a deployer sets beside the file, e.g.
    ("session.disable_quant_qdq", "1") to run QuantizeLinear/DequantizeLinear pairs as written
    instead of fusing them into integer kernels that round differently."""

    entries: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DecodeCheck:
    """After PARITY, a greedy decode with the exported key/value cache against eager PyTorch.

    For a decoder exported with its cache as flat tensors (the `flat_cache` fix): ONNX inputs
    `input_ids`, `attention_mask` and `past_key_<i>`/`past_value_<i>`, outputs `logits` and
    `present_key_<i>`/`present_value_<i>`. At each prompt length, a prefill (empty past) and
    `steps` decode steps, each feeding the presents back as the past; the eager reference is the
    exported module's `model` attribute (the transformers model) run on the whole sequence without
    a cache. The tokens must be equal and the last position's logits within the tolerances.

    `encoder`: an encoder-decoder, whose exported module is its decoder (inputs
    `decoder_input_ids`, `encoder_hidden_states`, `attention_mask`, the past and `cross_key_<i>`/
    `cross_value_<i>`); its `encoder_export()` gives the encoder's export (module, inputs, options),
    which writes `encoder_hidden_states` and the cross-attention cache. The prompt is then the
    encoder's input and the decoder starts from `decoder_start_token_id`.
    """

    prompt_lengths: tuple[int, ...] = (4, 9)
    steps: int = 3
    encoder: bool = False


@dataclass(frozen=True)
class StateCheck:
    """After PARITY, `calls` calls in ONNX Runtime with the model's state carried between them.

    For a model exported through the `state_io` wrapper (its forward takes the state forward()
    writes as its last inputs and returns the new state after its outputs): each call is fed the
    state the call before returned, from the state the model starts with, and compared with the
    user's model called as many times in PyTorch (worker/stateful.py)."""

    calls: int = 3


@dataclass(frozen=True)
class TrailingDict:
    """torch.onnx.export's args with an empty dict after them: the exporter reads a dict at the end
    of args as keyword arguments (its documented convention), so a forward() whose last positional
    argument is a dict is called without it unless another dict follows."""


@dataclass(frozen=True)
class PrefixParity:
    """PARITY for a loop exported to its last step where PyTorch leaves it early (a decode loop's
    `if finished: break` read as never taken): an output longer than PyTorch's along one dim
    matches when its first part, PyTorch's length of it, does. The rest are the steps the loop
    would have skipped, which the caller cuts (at the end-of-sequence token)."""


Step = (EvalMode | ArraysAsTensors | ScriptingOff | LoadCode | UseExporter | UseOpset | ExportCode | CustomOpsets | OperatorExportType | Unoptimized
        | StrictCapture | DynamicShapes | DeclareDynamic | RewriteOnnx | RuntimeKernels | EagerExport | QuantizeOnnx | DecodeCheck
        | SessionConfig | PrefixParity | TrailingDict | StateCheck | PerSample)

# Steps of which a recipe holds at most one: a later one replaces an earlier one when chaining.
_SINGLE = (ArraysAsTensors, ScriptingOff, UseExporter, UseOpset, OperatorExportType, Unoptimized, StrictCapture, DynamicShapes, DeclareDynamic, QuantizeOnnx, DecodeCheck, SessionConfig,
           PrefixParity, TrailingDict, StateCheck, PerSample)
# Steps written for one exporter: they mean nothing (or something else) to the other.
_EXPORTER_BOUND = (ExportCode, CustomOpsets, OperatorExportType, Unoptimized, StrictCapture, DynamicShapes)

_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (SetOpset, ConvertOpset, ExpandFunction, CastAround, PromoteInputs, SetIrVersion, ToFloat32, FoldConstants,
                CastOutputs, SplitSizesAsTensor, AlignIfBranches, NonNegativePerms, DropShapeAnnotations, NameOutputs, PerSampleLoop,
                Reference,
                EvalMode, ArraysAsTensors, ScriptingOff, LoadCode, UseExporter, UseOpset, ExportCode, CustomOpsets, OperatorExportType, Unoptimized,
                StrictCapture,
                DynamicShapes, DeclareDynamic, RewriteOnnx, RuntimeKernels, EagerExport, QuantizeOnnx, DecodeCheck, SessionConfig,
                PrefixParity, TrailingDict, StateCheck, PerSample)
}

S = TypeVar("S")


@dataclass(frozen=True)
class Recipe:
    """A fix the worker can apply: its family's kind and the steps, in order.

    `isolated`: the fix changes the model or a process-wide registry (a symbolic, eval mode, a
    different file), so it runs in a worker of its own instead of beside other fixes.
    """

    kind: str
    steps: tuple[Step, ...] = ()
    isolated: bool = False
    # The kinds of the recipes chained into this one, in order (a single fix: just `kind`).
    chain: tuple[str, ...] = field(default=())

    @property
    def alone(self) -> bool:
        """Whether the recipe needs a worker of its own: marked `isolated`, or it changes the
        loaded model or its example (LoadCode, EvalMode), which a worker checking several fixes
        one after another would carry into the next (or not see, where the example was read
        before)."""
        return self.isolated or any(isinstance(s, (LoadCode, EvalMode, ScriptingOff)) for s in self.steps)

    def first(self, cls: type[S]) -> S | None:
        """The recipe's first step of that type, if any."""
        return next((s for s in self.steps if isinstance(s, cls)), None)

    def all(self, cls: type[S]) -> list[S]:
        """Every step of that type, in order."""
        return [s for s in self.steps if isinstance(s, cls)]

    @property
    def exporter_bound(self) -> bool:
        """Whether a step was written for the chosen exporter (export code, custom opsets, export
        type, dynamic_shapes, a LoadCode that defines dynamic_shapes): switching exporters voids it."""
        return any(isinstance(s, _EXPORTER_BOUND) or (isinstance(s, LoadCode) and "dynamic_shapes =" in s.code)
                   for s in self.steps)

    @property
    def acts_on(self) -> int:
        """Where the fix acts, in the order a user applies fixes: 0 the model, 1 the export, 2 the
        exported file, 3 the runtime."""
        if any(isinstance(s, (EvalMode, ArraysAsTensors, ScriptingOff, LoadCode)) for s in self.steps):
            return 0
        if any(isinstance(s, RewriteOnnx) for s in self.steps):
            return 2
        if self.steps and all(isinstance(s, RuntimeKernels) for s in self.steps):
            return 3
        return 1

    def with_default(self, step: Step) -> Recipe:
        """The recipe with `step` added unless it already has a step of that type."""
        if self.first(type(step)) is not None:
            return self
        return replace(self, steps=(*self.steps, step))

    def superseded_by(self, later: Recipe) -> bool:
        """Whether `later` applied after this recipe leaves nothing of it: each of its steps is a
        setting (exporter, opset, ...) that `later` chooses again."""
        chosen = {type(s) for s in later.steps if isinstance(s, _SINGLE)}
        return bool(self.steps) and all(type(s) in chosen for s in self.steps)

    def then(self, later: Recipe) -> Recipe:
        """Both fixes at once: this one's steps, then the later one's.

        A setting both choose (exporter, opset, export type, dynamic shapes) takes the later
        recipe's value; code and rewrites of both run, this one's first.
        """
        replaced = {type(s) for s in later.steps if isinstance(s, _SINGLE)}
        steps = tuple(s for s in self.steps if type(s) not in replaced) + later.steps
        eager = [s for s in steps if isinstance(s, EagerExport)]
        if len(eager) > 1:
            # One export takes one set of changes: fold them into the first EagerExport's place.
            combined = eager[0]
            for step in eager[1:]:
                combined = combined.merged(step)
            at = steps.index(eager[0])
            steps = tuple(s for s in steps if not isinstance(s, EagerExport))
            steps = (*steps[:at], combined, *steps[at:])
        return Recipe(
            kind=f"{self.kind}+{later.kind}",
            steps=steps,
            isolated=self.isolated or later.isolated,
            chain=(*(self.chain or (self.kind,)), *(later.chain or (later.kind,))),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; every dataclass is tagged with its class name."""
        return _encode(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        """Rebuild a recipe from `to_dict`'s form.

        Raises:
            ValueError: an unknown step or a malformed field.
        """
        recipe = _decode(data)
        if not isinstance(recipe, Recipe):
            raise ValueError("not a recipe")  # noqa: TRY004 (malformed data, one error type)
        return recipe

    def key(self) -> str:
        """A stable identity: two findings proposing the same recipe share one check."""
        return json.dumps(self.to_dict(), sort_keys=True)


_CLASSES["Recipe"] = Recipe


def _encode(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        encoded: dict[str, Any] = {"type": type(value).__name__}
        for f in fields(value):
            encoded[f.name] = _encode(getattr(value, f.name))
        return encoded
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        name = value.get("type")
        cls = _CLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"unknown recipe step {name!r}")
        arguments = {k: _decode(v) for k, v in value.items() if k != "type"}
        try:
            return cls(**arguments)
        except TypeError as exc:
            raise ValueError(f"malformed {name}: {exc}") from None
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value
