"""General mechanisms for failures not seen before (issue 22), written after the fortieth
first-seen batch (fixtures/corpus/first_seen_2026-12-05ze.txt)."""

from __future__ import annotations

import torch

from onnxdoctor.worker.shapes import size_code_lines


class _Doubled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_the_size_check_reads_no_source_of_a_scripted_model() -> None:
    # timm's scriptable tf_efficientdet stem (pytorch/pytorch#55900): the check at other sizes
    # stopped (OD899) on torch's _CachedForward, which raises when forward is read off the class.
    assert size_code_lines(torch.jit.script(_Doubled())) == []
    assert size_code_lines(_Doubled()) == []
