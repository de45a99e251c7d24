"""Packed sequences exported as masked operations on the padded batch.

The TorchScript exporter keeps `pack_padded_sequence` / `pad_packed_sequence` only as a pair
around one recurrent layer, which it erases into the RNN node's `sequence_lens`: a packing that
is not paired that way fails ("Cannot export individual pack_padded_sequence or
pad_packed_sequence", pytorch/pytorch#49936), a pair with nothing between them is erased with
no zeroing (#48460), and the unpacked batch keeps the padded length where PyTorch trims it to
the longest sequence (#62240). torch.export cannot capture packing at all (#171978).

While the model is traced for the export, the recipe's code computes what packing means on the
padded batch: the packed data is the batch gathered where a step is within its sequence's length,
unpacking scatters it back into a tensor of the longest length (or `total_length`), and each
recurrent layer runs on the padded batch inside the pair the exporter knows, its output packed
again. Outside the trace every call is PyTorch's own, so the reference outputs are the model's.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe, Step, UseExporter

# OD299: the unpaired refusal; OD204: torch.export's; OD601/OD603/OD80x: a pair erased wrongly.
CODES = ("OD204", "OD299", "OD601", "OD603", "OD802", "OD803", "OD804")

PACKED_ON_PADDED = '''import sys

import torch
from torch.nn.utils import rnn as rnn_utils

# While the TorchScript exporter traces the model, packing is computed on the padded batch with
# masks; outside the trace every call below is PyTorch's own.
_pack, _pad = rnn_utils.pack_padded_sequence, rnn_utils.pad_packed_sequence


def _lengths_of(packed):
    return getattr(getattr(packed, "batch_sizes", None), "_padded_lengths", None)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    if not torch.jit.is_tracing():
        return _pack(input, lengths, batch_first, enforce_sorted)
    lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    x = input.transpose(0, 1) if batch_first else input  # (time, batch, ...)
    sorted_indices = None
    if not enforce_sorted:
        lengths, sorted_indices = torch.sort(lengths, descending=True)
        x = x.index_select(1, sorted_indices)
    steps = torch.arange(lengths.max())
    mask = steps.unsqueeze(1) < lengths.unsqueeze(0)  # (longest, batch): the steps that hold data
    batch_sizes = mask.sum(1)
    batch_sizes._padded_lengths = lengths  # how the packed data maps back onto the padded batch
    return rnn_utils.PackedSequence(x.index_select(0, steps)[mask], batch_sizes, sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    lengths = _lengths_of(sequence)
    if not torch.jit.is_tracing() or lengths is None:
        return _pad(sequence, batch_first, padding_value, total_length)
    data = sequence.data
    steps = torch.arange(lengths.max() if total_length is None else total_length)
    mask = steps.unsqueeze(1) < lengths.unsqueeze(0)
    padded = data.new_full((mask.shape[0], mask.shape[1], *data.shape[1:]), padding_value)
    mask = mask.reshape(*mask.shape, *[1] * (data.dim() - 1)).expand_as(padded)
    padded = padded.masked_scatter(mask, data)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths.index_select(0, sequence.unsorted_indices)
    return (padded.transpose(0, 1) if batch_first else padded), lengths


def _reordered(hx, order):
    if hx is None or order is None:
        return hx
    if isinstance(hx, tuple):
        return tuple(h.index_select(1, order) for h in hx)
    return hx.index_select(1, order)


def _on_padded(forward):
    # The recurrent layer runs inside the pack/unpack pair the exporter turns into sequence_lens.
    def packed_forward(self, input, hx=None):
        lengths = _lengths_of(input)
        if not torch.jit.is_tracing() or lengths is None:
            return forward(self, input, hx)
        padded, _ = pad_packed_sequence(rnn_utils.PackedSequence(input.data, input.batch_sizes, None, None))
        out, hidden = forward(self, _pack(padded, lengths), _reordered(hx, input.sorted_indices))
        out, _ = _pad(out)
        # The final state reads the unpacked output (a sum over none of its steps, exactly 0): a
        # model that keeps only the state (`_, (h_n, _) = lstm(packed)`) would otherwise leave the
        # unpack unused, and the exporter, which takes the pair only whole, a pack alone.
        anchor = out[:0].sum().to(out.dtype)
        hidden = tuple(h + anchor for h in hidden) if isinstance(hidden, tuple) else hidden + anchor
        mask = torch.arange(lengths.max()).unsqueeze(1) < lengths.unsqueeze(0)
        packed = rnn_utils.PackedSequence(out[mask], input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        return packed, _reordered(hidden, input.unsorted_indices)

    packed_forward.__wrapped__ = forward
    return packed_forward


if not hasattr(_pack, "__wrapped__"):  # once per process
    for layer in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
        layer.forward = _on_padded(layer.forward)
    pack_padded_sequence.__wrapped__, pad_packed_sequence.__wrapped__ = _pack, _pad
    for name, new in (("pack_padded_sequence", pack_padded_sequence), ("pad_packed_sequence", pad_packed_sequence)):
        old = getattr(rnn_utils, name)
        setattr(rnn_utils, name, new)
        # names the model's code imported itself (`from torch.nn.utils.rnn import pack_padded_sequence`)
        for module_name in {type(m).__module__ for m in model.modules()}:
            scope = vars(sys.modules[module_name]) if module_name in sys.modules else {}
            for key, value in list(scope.items()):
                if value is old:
                    scope[key] = new
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Packing computed on the padded batch, for a model whose code packs sequences."""
    classes = ctx.facts_of(Stage.LOAD).get("packed_sequences") or []
    if ctx.target_kind != "script" or not classes:
        return []
    steps: tuple[Step, ...] = (LoadCode(PACKED_ON_PADDED),)
    if ctx.exporter != "torchscript":
        steps += (UseExporter("torchscript"),)  # torch.export cannot capture packing (pytorch#171978)
    shown = ", ".join(classes[:3]) + (" ..." if len(classes) > 3 else "")
    return [Fix(
        kind="packed_on_padded",
        title=f"Export the packed sequences of {shown} as masked operations on the padded batch "
              "(TorchScript exporter)",
        snippet=PACKED_ON_PADDED + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n",
        applicability=Applicability.SAFE,
        cost="packing becomes NonZero/GatherND/ScatterND on the padded batch, each recurrent layer an "
             "ONNX RNN node with sequence_lens; the TorchScript exporter (torch.export cannot capture "
             "packed sequences)",
        recipe=Recipe("packed_on_padded", steps, isolated=True),
    )]
