"""General mechanisms for failures not seen before (issue 22), written after the sixty-sixth
first-seen batch (fixtures/corpus/first_seen_2026-12-07f.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# open-mmlab/mmdeploy#505: mmaction2's test forward returns `output.data.cpu().numpy()`, and the
# export wrapper makes it a tensor again with torch.from_numpy: the graph is one Constant.
NUMPY_ROUND_TRIP = '''
import torch
from torch import nn
dynamo = False

class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 3)

    def forward_test(self, x):
        return self.head(x).softmax(-1).data.cpu().numpy()

class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.recognizer = Recognizer()

    def forward(self, x):
        return torch.from_numpy(self.recognizer.forward_test(x))

def get_model():
    torch.manual_seed(0)
    return Wrapper().eval(), (torch.randn(2, 6),)
'''


@pytest.mark.slow
def test_results_converted_to_numpy_and_back_are_kept_tensors_and_verified(tmp_path: Path) -> None:
    script = tmp_path / "round_trip.py"
    script.write_text(NUMPY_ROUND_TRIP)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = next(f for f in diagnosis.findings if f.code == "OD210")
    fix = next(f for f in finding.fixes if f.kind == "numpy_outputs")
    assert fix.verified is True, fix.check


# pytorch#135197: an eager-mode QAT model converted with an LSTM inside: convert() swaps in
# torch's statically quantized LSTM, whose cell the TorchScript symbolics refuse (a Sigmoid on a
# quantized tensor).
STATIC_LSTM = '''
import torch
from torch import nn
dynamo = False

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.lstm = nn.LSTM(6, 6, batch_first=True)
        self.out = nn.Linear(6, 3)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x):
        x, _ = self.lstm(self.quant(x))
        return self.dequant(self.out(x))

def get_model():
    torch.manual_seed(0)
    torch.backends.quantized.engine = "x86"
    model = Tagger().train()
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    torch.ao.quantization.prepare_qat(model, inplace=True)
    for _ in range(3):
        model(torch.randn(4, 5, 6))
    return torch.ao.quantization.convert(model.eval()), (torch.randn(1, 5, 6),)
'''


@pytest.mark.slow
def test_a_statically_quantized_lstm_is_rebuilt_as_float_and_verified(tmp_path: Path) -> None:
    script = tmp_path / "static_lstm.py"
    script.write_text(STATIC_LSTM)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    fix = next(f for f in finding.fixes if f.kind == "quantized")
    assert fix.verified is True, (finding.code, finding.message, fix.check)
