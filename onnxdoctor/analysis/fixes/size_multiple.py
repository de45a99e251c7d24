"""forward() raised at the example because its sizes are not a multiple the network divides by (OD108).

An encoder-decoder that halves its feature maps k times and doubles them back (U-Nets, stacked
hourglasses, FPNs, Swin windows) runs only where each spatial size is a multiple of 2**k: at an
odd size a strided layer rounds, the upsampled map comes back one short or one long, and the skip
connection's `add` or `cat` raises ("The size of tensor a (3) must match the size of tensor b (2)",
"Sizes of tensors must match except in dimension 1. Expected size 16 but got size 15"). The
pipelines around such networks never feed them those sizes: nnU-Net pads each image to a multiple
of its total downsampling, restoration models pad to their window, detectors letterbox to their
stride. The route exports at the example's sizes rounded up to the smallest such multiple the
model runs at; the ONNX model then takes that size, and inputs are padded to it before it runs.
Where no spatial multiple runs, a 5-D clip's frame axis alone is rounded: a temporal-shift network
views its frames as (N, num_segments, ...) and an example of one frame is not a clip
(mmaction2#2161).
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

# What a skip connection or a window partition raises when sizes do not divide: two sizes that
# disagree, or a view whose shape does not fit. Errors about channels, keys, dtypes or ranks are
# not answered by other spatial sizes.
_SIZES_DISAGREE = re.compile(
    r"must match the size of tensor|sizes? of tensors must match|shape '\[[^\]]*\]' is invalid for input of size|"
    r"expected size \d+ but got size \d+|must be divisible by|not divisible by|"
    # A model's own check on two sizes (vocal-remover's crop: "h1_shape[3] must be greater than
    # h2_shape[3]").
    r"shape\[\d+\] must be (?:greater|smaller|less|larger|equal)",
    re.IGNORECASE,
)

ROUNDED = '''import math

import torch
import torch.nn.functional as F

# (Module level, where the script defines example_inputs and example_kwargs.)


# The spatial sizes of the example (each axis after the channels of a floating-point input with
# three to five axes; axes of 1 stay) rounded up to a multiple, the border the edge repeated as a
# pipeline's padding adds it; a bool or integer mask whose last axes are such an input's sizes is
# padded with zeros to match. None where every size already is one.
def _rounded(tensors, multiple):
    grown, too_large, extras = [], [], {}
    leaves = torch.utils._pytree.tree_leaves(tensors)
    for t in leaves:
        if torch.is_tensor(t) and t.is_floating_point() and 3 <= t.dim() <= 5:
            sizes = tuple(t.shape[2:])
            extras[sizes] = [0 if size == 1 else (-size) % multiple for size in sizes]

    def pad(t):
        if t.is_floating_point() and 3 <= t.dim() <= 5:
            sizes = tuple(t.shape[2:])
            extra = extras[sizes]
            if not any(extra):
                return t
            if math.prod(s + e for s, e in zip(sizes, extra)) > max(8 * math.prod(sizes), 1 << 20):
                too_large.append(t)  # a size many times the example's is no longer the example
            grown.append("x".join(str(size + e) for size, e in zip(sizes, extra)))
            padded = F.pad(t, [p for e in reversed(extra) for p in (0, e)], mode="replicate")
            if t.numel() and bool(t.min() == t.max()):
                # An example of one value (torch.zeros) carries a shape, not an image: normalisation
                # layers divide its nothing-but-rounding deviations by sqrt(eps), and no two
                # runtimes round alike. Values drawn around it (seeded) check the model instead.
                noise = torch.randn(padded.shape, generator=torch.Generator().manual_seed(0))
                padded = padded + noise.to(device=padded.device, dtype=padded.dtype)
            return padded
        for sizes, extra in extras.items():
            if any(extra) and t.dim() >= len(sizes) and tuple(t.shape[-len(sizes):]) == sizes:
                widths = [p for e in reversed(extra) for p in (0, e)]
                return F.pad(t.to(torch.uint8), widths).to(t.dtype) if t.dtype == torch.bool else F.pad(t, widths)
        return t
    rounded = torch.utils._pytree.tree_map_only(torch.Tensor, pad, tensors)
    return (rounded, grown) if grown and not too_large else None


def _runs(model, args, kwargs):
    # Tried in eval mode without gradients, training flags and buffers put back after: trying a
    # size must not move a batch norm's running statistics.
    modes = [(m, m.training) for m in model.modules()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    model.eval()
    try:
        with torch.no_grad():
            model(*args, **kwargs)
        return True
    except Exception:
        return False
    finally:
        for module, training in modes:
            module.training = training
        with torch.no_grad():
            for buffer, saved in buffers:
                if buffer.shape == saved.shape:
                    buffer.copy_(saved)


# A clip's frame axis (axis 1 of (N, T, C, H, W)) rounded up to a multiple, its last frame
# repeated: a temporal-shift network views the frames as (N, num_segments, ...) and takes only
# clips of num_segments frames. None where the axis already is one, or grows past 8 times the
# example. (Axis 1 of a 4-D input holds channels; a batch axis grown would hide a batch-1 bug.)
def _axis_rounded(tensors, axis, multiple):
    leaves = [t for t in torch.utils._pytree.tree_leaves(tensors)
              if torch.is_tensor(t) and t.is_floating_point() and t.dim() == 5]
    size = leaves[0].shape[axis] if leaves else 0
    extra = (-size) % multiple
    if not size or not extra or size + extra > 8 * size:
        return None

    def grow(t):
        if t.is_floating_point() and t.dim() == 5 and t.shape[axis] == size:
            edge = t.narrow(axis, size - 1, 1)
            return torch.cat([t, edge.expand(*[extra if d == axis else -1 for d in range(t.dim())])], dim=axis)
        return t
    shape = "x".join(str(d) for d in leaves[0].shape[:axis]) + ("x" if axis else "") + str(size + extra)
    return torch.utils._pytree.tree_map_only(torch.Tensor, grow, tensors), [f"{shape}x... (axis {axis})"]


# A network that halves its maps k times needs 2**k: the smallest multiple that runs, first;
# then a clip's frame axis alone.
_positional = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
_example = (tuple(_positional), dict(globals().get("example_kwargs") or {}))
_tried = []
_candidates = [(f"sizes that are multiples of {m}", lambda m=m: _rounded(_example, m))
               for m in (2, 4, 8, 16, 32, 64, 128, 256)]
_candidates += [(f"a clip's axis 1 a multiple of {m}", lambda m=m: _axis_rounded(_example, 1, m))
                for m in (2, 4, 8, 16, 32)]
for _label, _make in _candidates:
    _candidate = _make()
    if _candidate is not None:
        _tried.append(_label)
        if _runs(model, *_candidate[0]):
            (example_inputs, example_kwargs), _sizes = _candidate
            print(f"The model runs at {_label}: exported at {', '.join(_sizes)}.")
            break
else:
    raise RuntimeError(
        "the sizes that disagree are not a matter of the input size: forward() raises with the example's "
        f"sizes rounded up in each of the {len(_tried)} ways that changed them (spatial sizes to multiples of up "
        "to 256, then a 5-D clip's axis 1 alone to multiples of up to 32)"
        if _tried else "no multiple up to 256 changes the example's sizes (already multiples, or too large)")
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The example at sizes the network divides, where forward() raised about sizes that disagree."""
    load = ctx.facts_of(Stage.LOAD)
    text = ctx.load_error_text(finding)
    spatial = [i for i in load.get("inputs") or ()
               if isinstance(i, dict) and 3 <= len(i.get("shape") or ()) <= 5
               and str(i.get("dtype", "")).startswith(("float", "bfloat"))]
    if ctx.target_kind != "script" or not spatial or not _SIZES_DISAGREE.search(text):
        return []
    sizes = ", ".join("x".join(str(d) for d in i["shape"][2:]) for i in spatial[:3])
    export = "torch.onnx.export(model, example_inputs, 'model.onnx', kwargs=example_kwargs)\n"
    return [Fix(
        kind="size_multiple",
        title=f"If the network divides its feature maps (a U-Net, an hourglass, an FPN, windows) or takes a "
              f"fixed number of frames, the example's {sizes} may not be a multiple it divides by: export at the "
              "sizes rounded up to the smallest multiple it runs at, and pad inputs to that multiple before the "
              "ONNX model runs",
        snippet=ROUNDED + export,
        applicability=Applicability.UNSAFE,
        cost="the ONNX model takes the rounded sizes (declare them dynamic to take other multiples); inputs of "
             "other sizes are padded to a multiple before it runs and its outputs cropped back, as the model's "
             "own pipeline does; an example of one value (torch.zeros) is checked at values drawn around it; "
             "this is the example changed, not the model",
        recipe=Recipe("size_multiple", (LoadCode(ROUNDED),), isolated=True),
    )]
