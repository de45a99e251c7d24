"""Which opset the opset fix proposes, from the worker's registry facts (pure, no export).

The facts are what `worker/registry.py` reads from torch 2.13's TorchScript registry:
grid_sampler registers symbolics at opsets 16 and 20; unflatten starts at 13 and
scaled_dot_product_attention at 14.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from onnxdoctor.analysis.findings import make_finding
from onnxdoctor.analysis.fixes import opset
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Stage
from onnxdoctor.recipe import UseOpset


def _proposed(op: str, requested: int, facts: dict[str, object]) -> int | None:
    finding = make_finding("OD201", Stage.EXPORT, "refused", op=op, opset=requested)
    ctx = FixContext(target_kind="script", target_name="m.py", exporter="torchscript",
                     requested_opset=requested, op=op, op_facts=facts)
    fixes = opset.propose(finding, ctx)
    if not fixes:
        return None
    step = fixes[0].recipe.first(UseOpset) if fixes[0].recipe else None
    return step.opset if step else None


def test_a_refused_call_skips_to_the_next_registered_symbolic() -> None:
    facts = {"torchscript_opsets": list(range(16, 21)), "torchscript_registrations": [16, 20]}
    assert _proposed("aten::grid_sampler", 17, facts) == 20  # 18 would run opset 16's symbolic again


def test_the_opset_covers_every_op_of_the_graph_not_only_the_first_failure() -> None:
    facts = {"torchscript_opsets": list(range(13, 21)), "torchscript_registrations": [13],
             "graph_opset_floor": {"opset": 14, "op": "aten::scaled_dot_product_attention"}}
    assert _proposed("aten::unflatten", 12, facts) == 14


def test_without_registrations_the_lowest_supporting_opset_is_kept() -> None:
    assert _proposed("aten::unflatten", 12, {"torchscript_opsets": list(range(13, 21))}) == 13
    assert _proposed("aten::unflatten", 20, {"torchscript_opsets": list(range(13, 21))}) is None


@pytest.mark.slow
def test_the_worker_reads_the_refusing_symbolic_and_the_graph_floor_from_torchs_registry(tmp_path: Path) -> None:
    import torch
    import torch.nn.functional as F

    from onnxdoctor.worker.registry import (
        graph_opset_floor,
        refusing_symbolic,
        torchscript_registrations,
    )

    class Warp(torch.nn.Module):
        def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
            return F.grid_sample(x, grid, align_corners=False)

    args = (torch.rand(1, 2, 3, 4, 4), torch.rand(1, 3, 4, 4, 3) * 2 - 1)
    with pytest.raises(Exception) as caught:
        torch.onnx.export(Warp(), args, str(tmp_path / "m.onnx"), dynamo=False, opset_version=17)
    assert "GridSample with 5D" in str(caught.value)
    assert refusing_symbolic(caught.value) == "aten::grid_sampler"
    assert torchscript_registrations("aten::grid_sampler") == [16, 20]
    loaded = SimpleNamespace(model=Warp(), args=args, kwargs=None)
    assert graph_opset_floor(loaded) == {"opset": 16, "op": "aten::grid_sampler"}
