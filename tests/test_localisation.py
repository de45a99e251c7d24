"""A mismatch in a TorchScript export is localised to the first submodule whose output differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.parity import scope_names

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_torchscript_scopes_map_to_module_names() -> None:
    # A Sequential's child repeats its parent's name; a ModuleList item (never called) does not.
    assert scope_names(["layers", "layers.2", "act"]) == ["layers", "layers.2", "layers.2.act"]
    assert scope_names(["layers.0", "lin"]) == ["layers.0", "layers.0.lin"]
    assert scope_names(["encoder", "encoder.layer.0", "attention", "self"]) == [
        "encoder", "encoder.layer.0", "encoder.layer.0.attention", "encoder.layer.0.attention.self"]
    assert scope_names([]) == []


@pytest.mark.slow
def test_the_first_diverging_submodule_is_named_with_its_node_and_line() -> None:
    fixture = FIXTURES / "parity" / "od601_symbolic_wrong_math_in_block.py"
    (diagnosis,) = diagnose(str(fixture), DiagnoseOptions(fix=False))
    [finding] = [f for f in diagnosis.findings if f.code == "OD601"]
    # Block 0 (ReLU) matches; block 1's act, the wrong symbolic's HardSwish, is the first to differ.
    assert finding.node == "/layers/layers.1/act/HardSwish" and finding.op == "HardSwish"
    assert "module 'layers.1.act' (Act)" in finding.message
    line = int((finding.source or ":0").rsplit(":", 1)[1])
    assert finding.source.startswith("od601_symbolic_wrong_math_in_block.py:")  # type: ignore[union-attr]
    # The user's line that calls the op whose symbolic wrote the node.
    assert "myselu(" in fixture.read_text().splitlines()[line - 1]


@pytest.mark.slow
def test_a_zero_budget_skips_the_search_and_says_so() -> None:
    fixture = FIXTURES / "parity" / "od601_symbolic_wrong_math_in_block.py"
    (diagnosis,) = diagnose(str(fixture), DiagnoseOptions(fix=False, localize_budget=0))
    [finding] = [f for f in diagnosis.findings if f.code == "OD601"]
    assert finding.node is None and "--localize-budget of 0 s" in finding.message


CORPUS = FIXTURES / "corpus"


def _mismatch(name: str, fix: bool = False) -> Any:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=fix))
    [finding] = [f for f in diagnosis.findings if f.code == "OD601"]
    return finding


def _line(finding: Any, name: str) -> str:
    file, _, line = (finding.source or ":0").rpartition(":")
    assert file == name, finding.source
    return (CORPUS / name).read_text().splitlines()[int(line) - 1]


@pytest.mark.slow
def test_a_torchscript_mismatch_names_the_aten_op_whose_nodes_differ_first_and_its_line() -> None:
    # `//` on int64 is exported as a truncating Div: the embedding lookup after it differs too,
    # but the floor_divide call is where the difference arises (its inputs agree with PyTorch).
    name = "floor_divide_negative_relpos_pytorch_78442.py"
    finding = _mismatch(name)
    assert finding.op == "aten::floor_divide", finding.message
    assert "//" in _line(finding, name)
    assert "its inputs agree with PyTorch" in finding.message
    assert "as ONNX's reference implementation does" in finding.message


@pytest.mark.slow
def test_an_in_place_op_is_compared_with_its_value_before_later_ops_change_it() -> None:
    # words.index_add_(...) in place: the trace's value is copied where the op ran.
    name = "index_add_duplicate_wordpool_pytorch_111159.py"
    finding = _mismatch(name)
    assert finding.op == "aten::index_add", finding.message
    assert "index_add_(" in _line(finding, name)


@pytest.mark.slow
def test_a_node_the_runtime_computes_unlike_the_onnx_reference_is_named_and_rewritten() -> None:
    # ONNX Runtime's nearest Resize picks a neighbouring element at 26 -> 64 (onnxruntime#12098);
    # the library's gather rewrite of aten::upsample_nearest3d gives PyTorch's numbers exactly.
    finding = _mismatch("resize_nearest_26_to_64_onnxruntime_12098.py", fix=True)
    assert finding.op == "Resize" and "the runtime, not the export" in finding.message
    [rewrite] = [f for f in finding.fixes if f.kind == "rewrite"]
    assert rewrite.verified and rewrite.check is not None and rewrite.check.max_abs_diff == 0.0, rewrite


@pytest.mark.slow
def test_a_random_start_point_matches_in_distribution_not_as_a_mismatch() -> None:
    # Its one-run outputs differ (ONNX Runtime draws its own start index); over many runs the
    # export samples what PyTorch samples (docs/ARCHITECTURE.md, "Random outputs").
    (diagnosis,) = diagnose(str(CORPUS / "randint_farthest_point_sample_pointnet2_pytorch_131635.py"),
                            DiagnoseOptions(fix=False))
    assert not [f for f in diagnosis.findings if f.code == "OD601"]
    parity = next(o for o in diagnosis.stages if o.stage.value == "parity")
    assert parity.facts["random"]["matched"] is True and parity.facts["random"]["ops"] == ["RandomUniformLike"]


@pytest.mark.slow
def test_a_dynamo_mismatch_names_the_aten_op_its_first_differing_node_came_from() -> None:
    name = "sdpa_fully_masked_row_onnxscript_2479.py"
    finding = _mismatch(name)
    assert finding.op == "aten::scaled_dot_product_attention", finding.message
    assert "scaled_dot_product_attention(" in _line(finding, name)


def test_trace_values_are_copied_where_each_op_ran() -> None:
    import torch

    from onnxdoctor.worker.loader import LoadedModel
    from onnxdoctor.worker.parity import _traced_values

    class InPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y.add_(1.0)
            y.mul_(3.0)
            return y.add_(x)

    x = torch.arange(4.0)
    values = _traced_values(LoadedModel(InPlace(), (x,), {}))
    assert values is not None
    # add_ is converted as add; its first call's value is x + 1, not what mul_ and add_ made of it.
    first, second = values["aten::add"]
    assert torch.equal(first[0], x + 1) and torch.equal(second[0], (x + 1) * 3 + x)
    assert torch.equal(values["aten::mul"][0][0], (x + 1) * 3)
