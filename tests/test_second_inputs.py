"""OD210 checked at other input sets: a frozen trace is judged by what it does on other inputs.

The sets are the script's get_inputs2() and three sets derived from the example inside its range;
a difference is traced to its cause before the tracer is blamed (fixtures/frozen/).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.model import DiagnoseOptions, SecondInputs, Severity
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.parity import derived_input_sets

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# The tracer turns `float(self.scale)` into a Python number: frozen, but the same for every input.
BENIGN = '''
import torch

dynamo = False


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(self.scale)


def get_model():
    return Scaled().eval(), (torch.randn(2, 5),)


def get_inputs2():
    return (torch.linspace(-4.0, 4.0, 10).reshape(2, 5),)
'''


@pytest.mark.slow
def test_a_frozen_branch_that_flips_is_an_error_with_the_numbers() -> None:
    diagnosis = diagnose(str(FIXTURES / "export/od204_data_dependent_if.py"),
                         DiagnoseOptions(exporter="torchscript", fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity is Severity.ERROR and not diagnosis.healthy
    assert isinstance(frozen.detail, SecondInputs) and frozen.detail.matched is False
    assert "floats mirrored" in frozen.message and "max abs error" in frozen.message
    assert frozen.detail.frozen_cause is True  # traced at the differing inputs, it matches there


@pytest.mark.slow
def test_a_frozen_value_that_does_not_matter_is_a_warning_checked_at_the_script_s_own_inputs(tmp_path: Path) -> None:
    script = tmp_path / "scaled.py"
    script.write_text(BENIGN)
    diagnosis = diagnose(str(script), DiagnoseOptions(fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity is Severity.WARNING and diagnosis.healthy
    assert frozen.detail == SecondInputs(  # type: ignore[union-attr]
        "4 input sets: the script's get_inputs2(); the example's floats mirrored, shuffled and constant",
        True, frozen.detail.max_abs_diff)  # type: ignore[union-attr]
    assert "matches PyTorch too" in frozen.message


def test_derived_inputs_stay_in_the_example_s_range_and_domain() -> None:
    torch.manual_seed(0)
    image = torch.rand(1, 3, 8, 8)  # pixels in [0, 1]
    signed = torch.randn(2, 5)
    ids = torch.tensor([[3, 1, 4]])
    mask = torch.tensor([True, False])
    holes = torch.tensor([1.0, float("nan"), 2.0])
    sets = derived_input_sets((image, (signed, ids)), {"mask": mask, "holes": holes})
    assert [name for name, _a, _k in sets] == [f"the example's floats {n}" for n in ("mirrored", "shuffled", "constant")]
    lo, hi = image.min(), image.max()
    for _name, (img, (sig, got_ids)), kwargs in sets:
        assert img.dtype == image.dtype and img.shape == image.shape
        assert lo <= img.min() and img.max() <= hi  # never normal floats for an image
        assert sig.abs().max() <= signed.abs().max()  # within the example's magnitude
        assert torch.equal(got_ids, ids) and torch.equal(kwargs["mask"], mask)  # indices and masks stay
        assert torch.equal(kwargs["holes"].isnan(), holes.isnan())
    (_n, (mirrored, (negated, _i)), _k), (_n2, (shuffled, _s), _k2), (_n3, (constant, (zeros, _z)), _k3) = sets
    torch.testing.assert_close(mirrored, lo + hi - image)  # one-signed: reflected within [lo, hi]
    for seed in range(20):  # exactly in range, rounding included
        torch.manual_seed(seed)
        pixels = torch.rand(3, 16, 16)
        reflected = derived_input_sets((pixels,), {})[0][1][0]
        assert pixels.min() <= reflected.min() and reflected.max() <= pixels.max()
    torch.testing.assert_close(negated, -signed)  # spans zero: negated
    assert torch.equal(shuffled.flatten().sort().values, image.flatten().sort().values)  # same values
    assert not torch.equal(shuffled, image)
    assert torch.equal(constant, torch.full_like(image, float(lo)))  # the in-range value nearest 0
    assert torch.equal(zeros, torch.zeros_like(signed))


class _Router(torch.nn.Module):
    """A top-1 router: which expert wins is a tie at the constant set."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(x.argmax(-1), 4) * x.softmax(-1)


class _AnyBranch(torch.nn.Module):
    """`.any()` at zeros flips the same way for every small jitter: a real answer there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if bool((x.abs() > 0.5).any()) else x - 1


def test_a_derived_set_where_pytorchs_own_output_turns_on_ties_is_told_apart() -> None:
    from types import SimpleNamespace

    from onnxdoctor.worker.parity import _turns_on_ties

    zeros = (torch.zeros(6, 4),)
    assert _turns_on_ties(SimpleNamespace(model=_Router()), zeros, {}, 1e-4, 1e-3)
    assert not _turns_on_ties(SimpleNamespace(model=_Router()), (torch.randn(6, 4),), {}, 1e-4, 1e-3)
    assert not _turns_on_ties(SimpleNamespace(model=_AnyBranch()), zeros, {}, 1e-4, 1e-3)
    # Dropout left in training mode draws the same numbers for both jitters: not a tie.
    noisy = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    assert not _turns_on_ties(SimpleNamespace(model=noisy), (torch.randn(6, 4),), {}, 1e-4, 1e-3)


@pytest.mark.slow
def test_an_image_branch_no_valid_input_flips_verifies_the_tracer_s_fix() -> None:
    """Inputs in [0, 1] never take `image.max() > 1`: normal floats would, and wrongly blame the tracer."""
    # Every fix checked: the branch read one way ranks above the tracer and verifies first.
    diagnosis = diagnose(str(FIXTURES / "frozen/pixel_range_branch.py"), DiagnoseOptions(fix=True, all_fixes=True))[0]
    assert diagnosis.findings[0].code == "OD204"
    exporter = next(f for f in diagnosis.findings[0].fixes if f.kind == "exporter")
    assert exporter.verified is True, exporter.check
    assert "matches at 3 input sets" in exporter.check.detail  # type: ignore[union-attr]


@pytest.mark.slow
def test_agreeing_at_get_inputs2_does_not_clear_a_frozen_branch() -> None:
    diagnosis = diagnose(str(FIXTURES / "frozen/second_inputs_same_branch.py"),
                         DiagnoseOptions(exporter="torchscript", fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity is Severity.ERROR and not diagnosis.healthy
    assert isinstance(frozen.detail, SecondInputs) and frozen.detail.matched is False
    assert frozen.detail.source == "the example's floats mirrored"
    assert "it matched at the script's get_inputs2()" in frozen.message


@pytest.mark.slow
def test_a_difference_the_frozen_value_did_not_cause_is_not_blamed_on_the_tracer() -> None:
    # Scores rounded to whole numbers tie for real (a hair's nudge keeps the ties): the export
    # differs, and so does one traced at those inputs.
    diagnosis = diagnose(str(FIXTURES / "frozen/topk_rounded_ties_frozen_scale.py"), DiagnoseOptions(fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert isinstance(frozen.detail, SecondInputs)
    assert frozen.detail.matched is False and frozen.detail.frozen_cause is False
    assert "/TopK" in (frozen.detail.where or "")
    assert frozen.severity is Severity.WARNING and "not the cause" in frozen.message


@pytest.mark.slow
def test_a_fix_for_a_failure_at_other_inputs_is_judged_at_those_inputs() -> None:
    # The denoiser's trace froze its padded lengths: it matches at the example and differs at
    # get_inputs2(). The dynamo export matches at the example too, and at get_inputs2() it does
    # not run at all (the length went static): a check at the example alone called it verified.
    corpus = FIXTURES / "corpus" / "pad_valid_length_frozen_denoiser_onnx_1.py"
    (diagnosis,) = diagnose(str(corpus), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210" and finding.severity is Severity.ERROR
    exporter = next(f for f in finding.fixes if f.kind == "exporter")
    assert exporter.check is not None and exporter.check.reached is not None  # it ran, and got to PARITY
    assert exporter.verified is False, exporter.check
    assert "at other inputs (the script's get_inputs2())" in exporter.check.detail
