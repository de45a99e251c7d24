"""General mechanisms for failures not seen before (issue 22), written after the eighteenth
first-seen batch (fixtures/corpus/first_seen_2026-12-05h.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_torch_op_failing_inside_a_function_names_the_extension_op_beside_it() -> None:
    # basicsr's FusedLeakyReLUFunction: `input.new_empty(0)` is what the exporter names, the
    # compiled fused_bias_act beside it is what the export cannot do without (pytorch#116182),
    # and the Function is what the user wrote.
    (diagnosis,) = diagnose(str(CORPUS / "fused_bias_act_extension_stylegan2_gfpganv1_pytorch_116182.py"),
                            DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert finding.op == "FusedLeakyReLUFunction" and "aten::new_empty" in finding.message
    assert finding.torch_op == "basicsr_ops::fused_bias_act" and "basicsr_ops::fused_bias_act" in finding.message


@pytest.mark.slow
def test_a_function_applied_through_a_bound_apply_gets_its_kernel() -> None:
    # `inplace_abn_sync = InPlaceABNSync.apply` at module level: the Function's call is observed
    # through its forward, so its kernel fix has the types it needs.
    (diagnosis,) = diagnose(str(CORPUS / "inplace_abn_sync_extension_in_place_self_correction_human_parsing_82.py"),
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601"
    best = finding.fixes[0]
    assert best.verified is True and "InPlaceABNSync" in best.title, [(f.title, f.check) for f in finding.fixes]


@pytest.mark.slow
def test_an_argmax_that_skips_nan_in_onnx_runtime_is_rewritten_with_torchs_nan_rule() -> None:
    # apache/tvm#19558: ONNX Runtime's ArgMax passes over a NaN that torch.argmax points at.
    (diagnosis,) = diagnose(str(CORPUS / "argmax_nan_confidence_select_tvm_19558.py"), DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.torch_op) == ("OD601", "aten::argmax")
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified is True and best.check.max_abs_diff == 0


@pytest.mark.slow
def test_a_numpy_hand_off_at_the_top_of_a_helper_names_the_helper() -> None:
    # img2pose's post-processing converts its arguments with `.numpy()` on lines of their own and
    # goes on in scipy: the helper is what runs outside torch (its result is the graph's constant).
    (diagnosis,) = diagnose(str(CORPUS / "scipy_rotation_frozen_dof_projection_img2pose_77.py"),
                            DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD210", "transform_pose_global_project_bbox")
