"""General mechanisms for failures not seen before (issue 22), written after the twenty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-05k.txt and ...l.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import EagerExport, PrefixParity
from tests.test_first_seen_batch14 import _diagnosed

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# A branch on a value read out of a tensor: torch.export's guard names a float symbol (zuf0).
ITEM_BRANCH = '''
import torch

dynamo = True
opset_version = 18


class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum().item() > 3:
            return x * 2
        return x


def get_model():
    return Gate().eval(), (torch.ones(5),)
'''


def test_a_data_dependent_guard_names_the_op_whose_result_it_asked_about() -> None:
    # KNNImputer's `min(k, len(potential_donors_idx))` (pytorch#146990): torch says only "u0", at
    # the line with min(); the symbol is nonzero()'s row count, made two lines above.
    (diagnosis,) = diagnose(str(CORPUS / "nonzero_len_topk_k_knn_imputer_torch_export_pytorch_146990.py"),
                            DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD204"
    assert finding.torch_op == "aten::nonzero"
    assert "u0 is the data-dependent result of aten::nonzero at " \
           "nonzero_len_topk_k_knn_imputer_torch_export_pytorch_146990.py:58" in finding.message


def test_a_float_read_out_with_item_is_named_as_item(tmp_path: Path) -> None:
    finding = _diagnosed(tmp_path, ITEM_BRANCH, fix=False).findings[0]
    assert finding.code == "OD204"
    assert finding.torch_op == "aten::item"
    assert "zuf0 is the data-dependent result of aten::item at model.py:10" in finding.message


@pytest.mark.slow
def test_a_decode_loop_that_stops_early_is_run_to_its_end_and_compared_on_pytorchs_steps() -> None:
    # PARSeq's `if (tgt_in == eos).any(-1).all(): break` (yomitoku#84): the trace keeps the
    # example's 4 steps; never taken, the graph runs all 7, whose first 4 are PyTorch's.
    (diagnosis,) = diagnose(str(CORPUS / "ar_early_exit_eos_break_parseq_decode_yomitoku_84.py"),
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210"
    best = finding.fixes[0]
    assert best.verified is True and best.recipe is not None and best.recipe.first(PrefixParity) is not None
    assert "PyTorch's 4 of 7 along dim 1" in best.check.detail
    # Checked beyond the example (get_inputs2() runs all 7 steps in PyTorch too).
    assert "get_inputs2()" in best.check.detail


def test_a_longer_output_matches_only_where_pytorchs_part_of_it_does() -> None:
    import numpy as np

    from onnxdoctor.worker.parity import compare_prefix

    pytorch = [np.arange(8, dtype=np.float32).reshape(1, 4, 2)]
    longer = np.concatenate([pytorch[0], np.full((1, 3, 2), 99, np.float32)], axis=1)
    report = compare_prefix(pytorch, [longer], 1e-4, 1e-3)
    assert report["code"] is None and report["prefix"] == ["output 0: PyTorch's 4 of 7 along dim 1"]
    wrong = longer.copy()
    wrong[0, 2, 1] += 1
    assert compare_prefix(pytorch, [wrong], 1e-4, 1e-3)["code"] == "OD601"
    # Shorter, or longer along two dims: a shape difference as before.
    assert compare_prefix(pytorch, [longer[:, :3]], 1e-4, 1e-3)["code"] == "OD603"
    assert compare_prefix(pytorch, [np.zeros((2, 7, 2), np.float32)], 1e-4, 1e-3)["code"] == "OD603"
    # An output PyTorch does not have is a difference, whatever the others hold.
    assert compare_prefix(pytorch, [longer, longer], 1e-4, 1e-3)["code"] == "OD602"
    # Two outputs longer by different amounts are not one loop run longer: no cut.
    other = [pytorch[0], np.arange(6, dtype=np.float32)]
    assert compare_prefix(other, [longer, np.arange(9, dtype=np.float32)], 1e-4, 1e-3)["code"] == "OD603"
    # The report keeps the real shape.
    assert compare_prefix(pytorch, [longer], 1e-4, 1e-3)["outputs"][0]["ort_shape"] == [1, 7, 2]


def test_only_a_break_out_of_a_range_loop_is_an_early_exit(tmp_path: Path) -> None:
    from onnxdoctor.worker.provenance import leaves_bounded_loop

    source = tmp_path / "loops.py"
    source.write_text(
        "def f(x, done):\n"
        "    for step in range(8):\n"
        "        x = x + 1\n"
        "        if done(x):\n"            # line 4: leaves the range loop
        "            break\n"
        "    while True:\n"
        "        if done(x):\n"            # line 7: a while loop has no fixed count
        "            break\n"
        "    for step in range(8):\n"
        "        if done(x):\n"            # line 10: skips a step, does not leave
        "            continue\n"
        "        for inner in x:\n"
        "            if done(inner):\n"    # line 13: leaves the inner loop over a tensor
        "                break\n"
        "    for step in range(8):\n"
        "        try:\n"
        "            if done(x):\n"        # line 17: inside a try, still leaves the range loop
        "                break\n"
        "        finally:\n"
        "            pass\n"
        "    return x\n"
    )
    assert [line for line in (4, 7, 10, 13, 17) if leaves_bounded_loop(str(source), line)] == [4, 17]


@pytest.mark.slow
def test_what_forward_does_through_data_is_traced_when_exported_again() -> None:
    # BinaryNet's `input.data = Binarize(input.data)` (pytorch#51033): the tracer recorded neither
    # the read nor the assignment, so the graph multiplies unbinarized activations.
    (diagnosis,) = diagnose(str(CORPUS / "sign_data_binarize_binarynet_pytorch_51033.py"), DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601"
    fix = next(f for f in finding.fixes if f.kind == "traced_data")
    assert fix.verified is True, fix.check
    assert "sign_data_binarize_binarynet_pytorch_51033.py:35" in fix.title  # input.data = ...


def test_data_is_left_alone_outside_a_trace_and_restored_after() -> None:
    import torch

    from onnxdoctor.worker.fixkit import eager_export
    from onnxdoctor.worker.loader import LoadedModel

    loaded = LoadedModel(model=torch.nn.Identity(), args=(), kwargs={})
    x = torch.ones(3, requires_grad=True)
    with eager_export(loaded, EagerExport(traced_data=True)):
        x.data = torch.full((3,), 2.0)  # eager: the plain assignment, no autograd history
        assert x.tolist() == [2.0, 2.0, 2.0] and x.requires_grad and x.data.grad_fn is None
    assert "data" not in torch.Tensor.__dict__


@pytest.mark.slow
def test_a_dict_as_the_last_input_gets_an_empty_dict_after_it(tmp_path: Path) -> None:
    # face-vid2vid's keypoint dicts (SadTalker-Video-Lip-Sync#64): torch.onnx.export reads the last
    # dict of args as keyword arguments, and forward() misses kp_source.
    from onnxdoctor.analysis.fixes.program import fix_program

    script = CORPUS / "dict_last_arg_as_kwargs_keypoint_dicts_facerender_sadtalker_video_lip_sync_64.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and "missing 1 required positional argument" in finding.message
    best = finding.fixes[0]
    assert best.kind == "trailing_dict" and best.verified is True
    program = fix_program(best, str(script), "get_model", "script")
    assert "(*loaded.args, {})" in program


# `|`, `^` and `&` on integer tensors under the TorchScript exporter, whose symbolics take bool
# only at every opset (pix2pixHD's uint8 edge map, pix2pixHD#210).
INTEGER_BITWISE = '''
import torch

dynamo = False
opset_version = 11


class Edges(torch.nn.Module):
    def forward(self, labels):
        edge = torch.zeros(labels.shape, dtype=torch.uint8)
        edge[:, 1:] = edge[:, 1:] | (labels[:, 1:] != labels[:, :-1])
        flags = labels.to(torch.int32) ^ 5
        both = (labels > 1) & (labels < 4)
        # A Python number does not promote: edge | 2 stays uint8 (an output, so its type is compared).
        return edge.to(torch.float32) + flags.to(torch.float32) + both.to(torch.float32), edge | 2


def get_model():
    torch.manual_seed(0)
    return Edges().eval(), (torch.randint(0, 6, (3, 8)),)


def get_inputs2():
    torch.manual_seed(1)
    return (torch.randint(0, 6, (3, 8)),)
'''


@pytest.mark.slow
def test_integer_bitwise_ops_map_to_onnx_bitwise_ops_in_the_torchscript_exporter(tmp_path: Path) -> None:
    # Every fix tried: the dynamo exporter works on this model and would end the search.
    finding = _diagnosed(tmp_path, INTEGER_BITWISE, fix=True, all_fixes=True).findings[0]
    assert finding.code == "OD299" and finding.op in ("aten::bitwise_or", "aten::__or_")
    mapped = next(f for f in finding.fixes if "BitwiseOr" in f.title)
    assert mapped.kind == "rewrite" and mapped.verified is True, mapped.check
    # The library's rewrite is still offered after it, under the failing op's name.
    library = next(f for f in finding.fixes if f.title.startswith("Rewrite "))
    assert library.title.startswith(f"Rewrite {finding.op} ")


# Per-sample weights folded into the batch (StyleGAN2's modulated convolution): groups=batch, with
# the batch declared dynamic, is a symbolic group count ONNX's Conv cannot take.
PER_SAMPLE_CONV = '''
import torch
import torch.nn.functional as F

dynamo = True
opset_version = 18
dynamic_shapes = {"x": {0: torch.export.Dim("batch", min=1, max=8)}, "style": {0: torch.export.Dim("batch", min=1, max=8)}}


class Modulated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 3, 3, 3))
        self.up = torch.nn.Parameter(torch.randn(4, 2, 3, 3))

    def forward(self, x, style):
        batch = x.shape[0]
        w = (self.weight[None] * style[:, None, :, None, None]).reshape(batch * 4, 3, 3, 3)
        y = F.conv2d(x.reshape(1, batch * 3, 8, 8), w, padding=1, groups=batch)
        u = self.up[None].expand(batch, -1, -1, -1, -1).reshape(batch * 4, 2, 3, 3)
        z = F.conv_transpose2d(y, u, stride=2, padding=1, output_padding=1, groups=batch)
        return z.reshape(batch, 2, 16, 16)


def get_model():
    torch.manual_seed(0)
    return Modulated().eval(), (torch.randn(2, 3, 8, 8), torch.rand(2, 3))


def get_inputs2():
    torch.manual_seed(1)
    return (torch.randn(5, 3, 8, 8), torch.rand(5, 3))
'''


@pytest.mark.slow
def test_convolutions_with_a_symbolic_group_count_are_unfolded(tmp_path: Path) -> None:
    finding = _diagnosed(tmp_path, PER_SAMPLE_CONV, fix=True).findings[0]
    assert finding.code == "OD299" and finding.op == "aten::conv2d"
    unfolded = next(f for f in finding.fixes if f.recipe is not None and f.recipe.kind == "unfolded_convs")
    assert unfolded.verified is True, unfolded.check
    assert "get_inputs2()" in unfolded.check.detail  # batch 5 as well as the example's 2
