"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-twelfth
to hundred-and-fifteenth first-seen batches (fixtures/corpus/first_seen_2026-12-09e.txt to 09h)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from diagnosed import diagnosed, first_finding
from onnx import helper

from onnxdoctor.analysis.classify import extract_op
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.rewrites import find_rewrites
from onnxdoctor.rewrites.linalg import LSTSQ
from onnxdoctor.worker.openvino_target import first_failures

# A document rectifier (pytorch#114353): the page's perspective warp solved with
# torch.linalg.lstsq, whose fake kernel torch.export refuses (its outputs' shapes depend on the
# driver and the rank).
LSTSQ_WARP = '''import torch
import torch.nn as nn

dynamo = True


class Rectifier(nn.Module):
    def __init__(self):
        super().__init__()
        # Dropout: a fix that left the model training would differ from PyTorch at other inputs.
        self.corners = nn.Sequential(nn.Linear(16, 8), nn.Dropout(0.5))

    def forward(self, features):
        src = self.corners(features).view(-1, 4, 2)
        dst = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]).expand_as(src)
        x, y = src[..., 0], src[..., 1]
        u, v = dst[..., 0], dst[..., 1]
        one, zero = torch.ones_like(x), torch.zeros_like(x)
        rows_u = torch.stack([x, y, one, zero, zero, zero, -u * x, -u * y], -1)
        rows_v = torch.stack([zero, zero, zero, x, y, one, -v * x, -v * y], -1)
        system = torch.cat([rows_u, rows_v], 1)
        target = torch.cat([u, v], 1).unsqueeze(-1)
        return torch.linalg.lstsq(system, target).solution.squeeze(-1)


def get_model():
    torch.manual_seed(0)
    return Rectifier().eval(), (torch.randn(2, 16),)
'''

# Singular spectrum analysis in a waveform classifier (onnx#3839): torch.linalg.svd in forward,
# TorchScript exporter; no exporter maps the SVD.
SVD_DENOISE = '''import torch
import torch.nn as nn

dynamo = False
opset_version = 17


class Denoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6 * 6, 3)

    def forward(self, signal):
        trajectory = torch.stack([signal[:, i:i + 6] for i in range(6)], 1)  # Hankel [batch, 6, 6]
        u, s, vh = torch.linalg.svd(trajectory)
        kept = (u[..., :4] * s[..., None, :4]) @ vh[..., :4, :]
        return self.head(kept.flatten(1))


def get_model():
    torch.manual_seed(0)
    return Denoise().eval(), (torch.randn(2, 20),)
'''

# A panorama network with horizontally wrapping convolutions (openvino#37772): the dynamo exporter
# writes Pad(mode="wrap"), which OpenVINO cannot convert; the Conv after it fails too, for want
# of its input's rank.
WRAPPING_PAD = '''import torch
import torch.nn as nn

dynamo = True
targets = ["openvino"]


class Panorama(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, image):
        wrapped = nn.functional.pad(image, (1, 1, 0, 0), mode="circular")
        return self.conv(nn.functional.pad(wrapped, (0, 0, 1, 1)))


def get_model():
    torch.manual_seed(0)
    return Panorama().eval(), (torch.randn(1, 3, 8, 16),)
'''


def test_an_op_torch_export_cannot_capture_is_named_and_its_call_rewritten(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, LSTSQ_WARP, "OD204")
    assert finding.op == "aten::linalg_lstsq"
    best = finding.fixes[0]
    assert best.recipe is not None and best.recipe.kind == "rewrite_call" and best.verified is True, [
        (f.kind, f.title, f.check) for f in finding.fixes]


def test_an_unrolled_svd_is_traced_through_its_call_first(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SVD_DENOISE, "OD202")
    best = finding.fixes[0]
    assert best.recipe is not None and best.recipe.kind == "rewrite_call" and best.verified is True, [
        (f.kind, f.title, f.check) for f in finding.fixes]
    assert best.check is not None and best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-4


def test_a_target_failure_downstream_of_another_is_not_named_and_the_other_exporter_is_judged_by_it(
        tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    diagnosis = diagnosed(tmp_path, WRAPPING_PAD)
    target = [f for f in diagnosis.findings if f.code in ("OD701", "OD702")]
    assert [f.op for f in target] == ["Pad"], [(f.code, f.op, f.message) for f in target]
    fix = next(f for f in target[0].fixes if f.kind == "exporter")
    assert fix.verified is True and fix.check is not None and dict(fix.check.targets).get("openvino") == "parity"


def test_first_failures_keeps_the_failed_node_no_failed_node_feeds() -> None:
    nodes = [helper.make_node("Pad", ["x", "pads"], ["padded"], name="pad"),
             helper.make_node("Relu", ["padded"], ["act"], name=""),
             helper.make_node("Conv", ["act", "w"], ["y"], name="conv"),
             helper.make_node("Conv", ["x", "w"], ["z"], name="side")]
    graph = helper.make_graph(nodes, "g", [], [])
    model = helper.make_model(graph)
    failed = [{"op": "Conv", "node": "conv"}, {"op": "Pad", "node": "pad"}, {"op": "Conv", "node": "z"}]
    # The Conv fed by the Pad is a knock-on; the one on the side (named by its output) is a cause too.
    assert [f["node"] for f in first_failures(model, failed)] == ["pad", "z"]
    # An unnamed node upstream is not taken for a failed one (OpenVINO gave no name for a failure).
    assert [f["node"] for f in first_failures(model, [{"op": "Conv", "node": "conv"}, {"op": "Pad", "node": ""}])] == [
        "conv", ""]


def test_a_dynamic_output_shape_names_the_op() -> None:
    text = "torch._subclasses.fake_tensor.DynamicOutputShapeException: aten.linalg_lstsq.default"
    assert extract_op(text) == "aten::linalg_lstsq"


@pytest.mark.parametrize("shape, rhs", [((10, 4), (10, 3)), ((8, 8), (8, 1)), ((3, 5), (3, 2)), ((2, 9, 4), (2, 9)),
                                        ((2, 7, 3), (2, 7, 2)), ((10, 4), (10,)), ((6, 1), (6, 2))])
@pytest.mark.parametrize("driver", [None, "gelsd", "gels"])
def test_lstsq_rewrite_matches_torch(shape: tuple[int, ...], rhs: tuple[int, ...], driver: str | None) -> None:
    torch.manual_seed(0)
    scope: dict = {"torch": torch}
    exec(compile(LSTSQ, "<rewrite aten::linalg_lstsq>", "exec"), scope)  # noqa: S102
    A, B = torch.randn(*shape), torch.randn(*rhs)
    if len(rhs) == len(shape) - 1 and len(shape) == 3:
        B = B.unsqueeze(-1)
    expected = torch.linalg.lstsq(A, B, driver=driver)
    got = scope["linalg_lstsq"](A, B, driver=driver)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in expected]
    torch.testing.assert_close(got[0], expected.solution, atol=5e-5, rtol=1e-4)
    if expected.rank.numel():
        assert torch.equal(got[2], expected.rank)


def test_lstsq_of_a_rank_deficient_matrix_is_the_minimum_norm_solution() -> None:
    torch.manual_seed(1)
    scope: dict = {"torch": torch}
    exec(compile(LSTSQ, "<rewrite aten::linalg_lstsq>", "exec"), scope)  # noqa: S102
    A = torch.randn(6, 3)
    A = torch.cat([A, 2 * A[:, :1]], 1)  # rank 3 of 4
    B = torch.randn(6, 2)
    got = scope["linalg_lstsq"](A, B)
    torch.testing.assert_close(got[0], torch.linalg.pinv(A) @ B, atol=1e-5, rtol=1e-4)
    assert int(got[2]) == 3


@pytest.mark.parametrize("n", [1, 2, 5, 16, 32])
def test_round_robin_jacobi_svd_reaches_lapack_at_larger_sizes(n: int) -> None:
    torch.manual_seed(n)
    scope: dict = {"torch": torch}
    exec(compile(LSTSQ, "<rewrite aten::linalg_lstsq>", "exec"), scope)  # noqa: S102
    features = torch.randn(3, n, 2 * n)
    features = features - features.mean(-1, keepdim=True)
    for A in (torch.randn(3, 2 * n, n), features @ features.transpose(1, 2) / (2 * n) + 1e-4 * torch.eye(n),
              1e12 * torch.randn(3, n, n), 1e-14 * torch.randn(3, n, n)):  # far from 1: no overflow, no underflow
        U, S, V = scope["_jacobi_svd"](A)
        torch.testing.assert_close(S, torch.linalg.svdvals(A), atol=1e-5 * float(S.max()), rtol=0)
        torch.testing.assert_close(U.transpose(-2, -1) @ U, torch.eye(n).expand(3, n, n), atol=3e-6, rtol=0)
        torch.testing.assert_close(U @ torch.diag_embed(S) @ V.transpose(-2, -1), A, atol=2e-5 * float(A.abs().max()),
                                   rtol=0)


def test_lstsq_is_rewritten_at_its_call_only() -> None:
    (entry,) = find_rewrites("aten::linalg_lstsq")
    assert not entry.captured and entry.public_calls() == (("torch.linalg.lstsq", "linalg_lstsq"),)
    (svd,) = find_rewrites("aten::linalg_svd")
    assert svd.captured and ("torch.linalg.svd", "linalg_svd") in svd.public_calls()


# A stacked ensemble of LSTMs run through torch.func.vmap (pytorch#105982): forward() itself stops.
VMAPPED_LSTM = '''import copy

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap

dynamo = True


class Ensemble(nn.Module):
    def __init__(self):
        super().__init__()
        members = [nn.LSTM(4, 6, batch_first=True) for _ in range(3)]
        params, _ = stack_module_state(members)
        self.params = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(v) for k, v in params.items()})
        self.names = list(params)
        base = copy.deepcopy(members[0]).to("meta")

        def one(p, x):
            return functional_call(base, p, (x,))[0]

        self.run = vmap(one, in_dims=(0, None))

    def forward(self, x):
        return self.run({k: self.params[k.replace(".", "_")] for k in self.names}, x).mean(0)


def get_model():
    torch.manual_seed(0)
    return Ensemble().eval(), (torch.randn(2, 5, 4),)
'''


def test_forward_stopped_by_vmap_names_the_op_without_a_batching_rule(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, VMAPPED_LSTM, "OD108", fix=False)
    assert finding.op == "aten::lstm", finding.message


def test_every_listed_call_is_torchs_and_its_function_the_entrys() -> None:
    import importlib

    from onnxdoctor.rewrites import REWRITES

    for rewrite in REWRITES:
        for call, function in rewrite.calls:
            owner, name = call.rsplit(".", 1)
            assert hasattr(importlib.import_module(owner) if owner != "torch.Tensor" else torch.Tensor, name), call
            assert f"def {function}(" in rewrite.source, (rewrite.op, function)


def test_the_reference_is_torchs_own_while_the_export_runs_the_library(tmp_path: Path) -> None:
    # An SVD whose U alone is used: the library's U may differ from LAPACK's by column signs, so a
    # check against the library's own numbers would pass where PyTorch's differ.
    source = SVD_DENOISE.replace("kept = (u[..., :4] * s[..., None, :4]) @ vh[..., :4, :]", "kept = u * 1.0")
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    # The call route is ranked first: one check is enough (the others would all be tried, and fail).
    finding = diagnose(str(script), DiagnoseOptions(max_fix_checks=1))[0].findings[0]
    assert finding.code == "OD202", finding.message
    call = next(f for f in finding.fixes if f.recipe is not None and f.recipe.kind == "rewrite_call")
    # Exported and run, then found to differ from PyTorch's LAPACK U: a mismatch, not a failure to export.
    assert call.verified is not True and call.check is not None and call.check.problem == "OD601", call.check
