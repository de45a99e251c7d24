"""General mechanisms for failures not seen before (issue 22), written after the sixty-ninth and
seventieth first-seen batches (fixtures/corpus/first_seen_2026-12-07i.txt, first_seen_2026-12-07j.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.facts import sparse_tensors

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
# pytorch/pytorch#71786 in DCRNN's shape: the diffusion convolution's supports are sparse
# matrices held in a plain list attribute.
DCRNN = CORPUS / "sparse_mm_diffusion_conv_dcgru_dcrnn_pytorch_71786.py"


class _Supports(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        eye = torch.eye(3)
        self.supports = [eye.to_sparse(), eye]
        self.by_name = {"walk": eye.to_sparse_csr()}
        self.register_buffer("plain", eye)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.supports[0], x)


def test_sparse_tensors_in_lists_and_dicts_of_a_module_are_named() -> None:
    assert sparse_tensors(_Supports()) == ["supports[0]", "by_name['walk']"]


@pytest.mark.slow
def test_sparse_supports_held_in_a_list_are_exported_dense() -> None:
    (diagnosis,) = diagnose(str(DCRNN), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    best = finding.fixes[0]
    assert best.kind == "dense_sparse" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]
