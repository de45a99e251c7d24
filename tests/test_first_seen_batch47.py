"""General mechanisms for failures not seen before (issue 22), written after the forty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-06g.txt)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# Mixtral's MoE block before transformers#29858 (optimum#1671): each expert's tokens are indexed
# through `.tolist()`, which the tracer records as the example's constant lists.
TOLIST_ROUTER = '''
import torch
dynamo = False

class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(8, 3)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        choice = self.gate(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            (rows,) = torch.where(choice == e)
            rows_list = rows.tolist()
            out.index_add_(0, rows, expert(x[rows_list]))
        return out

def get_model():
    torch.manual_seed(0)
    return Router().eval(), (torch.randn(12, 8),)

def get_inputs2():
    torch.manual_seed(5)
    return (torch.randn(12, 8),)
'''


@pytest.mark.slow
def test_a_list_the_trace_froze_is_kept_a_tensor_and_named_where_it_was_taken(tmp_path: Path) -> None:
    script = tmp_path / "router.py"
    script.write_text(TOLIST_ROUTER)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", [(f.code, f.message) for f in diagnosis.findings]
    best = finding.fixes[0]
    assert best.kind == "tensor_values" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "router.py:16" in best.title and ".tolist()" in best.title  # the line that took the list out


# pointnet2_ops-style Functions (erikwijmans/Pointnet2_PyTorch#189): each forward fills a buffer
# through NumPy, where the tracer cannot see; a node for one Function leaves the other frozen.
TWO_OPAQUE_FUNCTIONS = '''
import numpy as np
import torch
dynamo = False

class Nearest(torch.autograd.Function):
    @staticmethod
    def forward(ctx, points):
        out = torch.zeros(points.shape[0], dtype=torch.int64)
        # lexsort: a NumPy function torch.export cannot trace either
        p = np.abs(points.detach().numpy())
        out.numpy()[:] = np.lexsort(p.T[::-1])[:p.shape[0]] % p.shape[1]
        return out

class Pick(torch.autograd.Function):
    @staticmethod
    def forward(ctx, points, index):
        out = torch.zeros(points.shape[0])
        p = points.detach().numpy()
        out.numpy()[:] = p[np.arange(p.shape[0]), index.numpy()]
        return out

class Model(torch.nn.Module):
    def forward(self, x):
        return Pick.apply(x, Nearest.apply(x)) * 2.0

def get_model():
    torch.manual_seed(0)
    return Model().eval(), (torch.randn(6, 5),)
'''


@pytest.mark.slow
def test_functions_that_froze_together_get_their_nodes_in_one_fix(tmp_path: Path) -> None:
    script = tmp_path / "opaque.py"
    script.write_text(TWO_OPAQUE_FUNCTIONS)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601", [(f.code, f.message) for f in diagnosis.findings]
    best = finding.fixes[0]
    assert best.kind == "function_kernel" and best.verified is True, [(f.title, f.check) for f in finding.fixes]
    assert "Nearest and Pick" in best.title or "Pick and Nearest" in best.title
    assert best.snippet.count("@onnx_op(") == 2


def test_a_random_op_exported_as_several_nodes_is_named_random_not_held_to_the_reference(tmp_path: Path) -> None:
    # PointNet++'s farthest-point sampling starts at torch.randint(0, N, (B,)) (Pointnet_Pointnet2_pytorch
    # #175): the dynamo exporter writes RandomUniformLike, Mul and Cast, and the first differing
    # value is the Cast's. Its draw differs by design, not because ONNX Runtime computes it otherwise.
    import torch

    from onnxdoctor.worker.parity import first_diverging_value
    from onnxdoctor.worker.provenance import dynamo_table

    class Start(torch.nn.Module):
        def forward(self, xyz: torch.Tensor) -> torch.Tensor:
            start = torch.randint(0, xyz.shape[1], (xyz.shape[0],))
            return xyz[torch.arange(xyz.shape[0]), start]

    args = (torch.randn(2, 64, 3),)
    program = torch.onnx.export(Start(), args, dynamo=True, verbose=False)
    path = tmp_path / "start.onnx"
    program.save(str(path))
    model = onnx.load(str(path))
    state = {"loaded": SimpleNamespace(args=args, kwargs={}), "onnx_program": program, "onnx_path": path,
             "onnx_model": model, "provenance": dynamo_table(model, tmp_path / "start.py")}
    found = first_diverging_value(state, 1e-4, 1e-3)
    assert found is not None and found["torch_op"] == "aten::randint", found
    assert found["random"] == ["aten::randint"] and "reference" not in str(found)
