"""Packed sequences exported as masked operations on the padded batch (analysis/fixes/packed.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# Unsorted lengths through a stacked bidirectional LSTM, whose packed output feeds a GRU, unpacked
# with a padding value; the hidden states come back in the caller's order. The TorchScript
# exporter erases the pack/unpack pair, and so the padding value and the trim to the longest length.
STACKED = '''
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence as pack, pad_packed_sequence

dynamo = False
opset_version = 14
input_names = ["x", "lengths"]
dynamic_axes = {"x": {0: "time", 1: "batch"}, "lengths": {0: "batch"}}


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(6, 5, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(10, 4, bidirectional=True)

    def forward(self, x, lengths):
        out, (h, c) = self.rnn(pack(x, lengths, enforce_sorted=False))
        out, h2 = self.gru(out)
        out, lens = pad_packed_sequence(out, padding_value=-1.0)
        return out, h, c, h2, lens


def get_model():
    torch.manual_seed(0)
    return Tagger().eval(), (torch.randn(9, 4, 6), torch.tensor([5, 9, 2, 7]))


def get_inputs2():
    torch.manual_seed(1)
    return (torch.randn(12, 6, 6), torch.tensor([3, 10, 2, 7, 1, 10]))
'''


@pytest.mark.slow
def test_stacked_bidirectional_packing_is_exported_on_the_padded_batch(tmp_path: Path) -> None:
    script = tmp_path / "tagger.py"
    script.write_text(STACKED, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601", [(f.code, f.message) for f in diagnosis.findings]
    packed = next(f for f in finding.fixes if f.kind == "packed_on_padded")
    # Verified at the example and at get_inputs2 (another batch, another longest length).
    assert packed.verified, packed.verification


@pytest.mark.slow
def test_an_unpaired_packing_is_named_and_exported_on_the_padded_batch() -> None:
    # BatchNorm on PackedSequence.data between pack and GRU: the exporter refuses the lone pack.
    path = CORPUS / "pack_padded_sequence_unpaired_batchnorm_packed_data_pytorch_49936.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "prim::PackPadded")
    assert finding.fixes[0].kind == "packed_on_padded" and finding.fixes[0].verified, \
        [(f.kind, f.verified) for f in finding.fixes]
