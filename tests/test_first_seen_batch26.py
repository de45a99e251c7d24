"""General mechanisms for failures not seen before (issue 22), written during the twenty-sixth
first-seen batch (fixtures/corpus/first_seen_2026-12-05q.txt)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(path: Path, *, fix: bool = True) -> Finding:
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=1))
    return diagnosis.findings[0]


# A moving average as differences of a running sum (an integral signal): the window sums cancel
# all but a few digits of the cumsum, so its accumulator's width decides the result.
BOX_FILTER = '''
import torch

dynamo = False
opset_version = 17


class BoxFilter(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.cumsum(x, dim=-1)
        return (total[..., 64:] - total[..., :-64]) / 64


def get_model():
    torch.manual_seed(0)
    return BoxFilter().eval(), (torch.rand(2, 200000),)
'''


@pytest.mark.slow
def test_a_cumsum_onnx_runtime_sums_narrower_than_pytorch_is_computed_in_float64(tmp_path: Path) -> None:
    # PyTorch's CPU cumsum keeps a float64 accumulator for float32 data; ONNX Runtime's CumSum sums
    # in float32, 0.05 apart after 10^5 steps: computed in float64 and rounded once, exactly equal.
    script = tmp_path / "box_filter.py"
    script.write_text(textwrap.dedent(BOX_FILTER))
    finding = _diagnosed(script)
    assert finding.code == "OD601"
    best = finding.fixes[0]
    assert best.kind == "cast" and best.verified and "CumSum in float64" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]
    assert best.check is not None and best.check.max_abs_diff == 0.0


@pytest.mark.slow
def test_a_sparse_tensor_the_model_holds_is_built_dense_though_the_error_never_says_sparse() -> None:
    # A sparse COO attribute made dense in forward: the TorchScript exporter says only
    # "Unsupported value kind: Tensor". The load stage lists the model's sparse tensors.
    finding = _diagnosed(CORPUS / "sparse_coo_attribute_to_dense_traced_constant_pytorch_35294.py")
    assert finding.code == "OD299" and "sparse" not in finding.message.lower()
    best = finding.fixes[0]
    assert best.kind == "dense_sparse" and best.verified, [(f.kind, f.verified) for f in finding.fixes]


# An STFT returned complex: ONNX has no complex outputs, and the dynamo exporter writes real pairs.
SPECTRUM = '''
import torch

dynamo = True


class Spectrum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x * 2.0, dim=-1)


def get_model():
    torch.manual_seed(0)
    return Spectrum().eval(), (torch.randn(2, 32),)
'''


@pytest.mark.slow
def test_complex_outputs_are_said_to_be_real_pairs_and_returned_as_such(tmp_path: Path) -> None:
    script = tmp_path / "spectrum.py"
    script.write_text(textwrap.dedent(SPECTRUM))
    finding = _diagnosed(script)
    assert finding.code == "OD603"
    assert "complex64, which the export holds as (real, imaginary) pairs" in finding.message
    assert "as pairs the values agree" in finding.message
    best = finding.fixes[0]
    assert best.kind == "complex_outputs" and best.verified, [(f.kind, f.verified) for f in finding.fixes]
    assert "torch.view_as_real" in best.snippet


@pytest.mark.slow
def test_a_topk_whose_order_pytorch_leaves_unspecified_is_asked_for_sorted_results() -> None:
    # topk(sorted=False): the same k elements, in another order in ONNX Runtime than in PyTorch.
    finding = _diagnosed(CORPUS / "topk_unsorted_smallest_candidates_pytorch_37846.py")
    assert finding.code == "OD601" and finding.onnx_op == "TopK"
    best = finding.fixes[0]
    assert best.kind == "sorted_topk" and best.verified, [(f.kind, f.verified) for f in finding.fixes]
    assert "sorted=True" in best.snippet
