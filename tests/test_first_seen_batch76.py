"""General mechanisms for failures not seen before (issue 22), written after the seventy-sixth
first-seen batch (fixtures/corpus/first_seen_2026-12-07p.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from diagnosed import first_finding

from onnxdoctor.analysis.fixes.batch_axis import _SHAPE_ERROR, BATCHED
from onnxdoctor.analysis.fixes.rewrite import _REFUSALS
from onnxdoctor.model import Finding
from onnxdoctor.worker.loader import LoadedModel
from onnxdoctor.worker.registry import decomposed_origin

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"

# One image without its batch axis: Conv2d takes it unbatched, BatchNorm2d then refuses 3-D input.
UNBATCHED = '''import torch
import torch.nn as nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()
    return model, (torch.randn(3, 16, 16),)
'''

# A linear layer whose input size disagrees with what feeds it (a model pruned on one side): no
# batch axis helps, and the fix must say it failed.
MISMATCHED = '''import torch
import torch.nn as nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(), nn.Linear(100, 4)).eval()
    return model, (torch.randn(1, 3, 16, 16),)
'''


def _forward_failed(tmp_path: Path, source: str) -> Finding:
    return first_finding(tmp_path, source, "OD108")


@pytest.mark.slow
def test_an_example_without_its_batch_axis_gets_one_and_is_verified(tmp_path: Path) -> None:
    best = _forward_failed(tmp_path, UNBATCHED).fixes[0]
    assert best.kind == "batch_axis" and best.verified is True, best.check
    assert "(3, 16, 16)" in best.title and "(1, 3, 16, 16)" in best.title


@pytest.mark.slow
def test_a_batch_axis_does_not_mend_sizes_that_disagree(tmp_path: Path) -> None:
    tried = [f for f in _forward_failed(tmp_path, MISMATCHED).fixes if f.kind == "batch_axis"]
    assert tried and tried[0].check is not None and tried[0].verified is False, tried


def test_the_batch_axis_reaches_nested_and_keyword_tensors_and_leaves_scalars() -> None:
    scope = {"torch": torch, "example_inputs": ([torch.zeros(3, 4), torch.tensor(2.0)], torch.zeros(5)),
             "example_kwargs": {"mask": torch.ones(4, dtype=torch.bool)}}
    exec(BATCHED, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    (pair, flat), keywords = scope["example_inputs"], scope["example_kwargs"]
    assert [tuple(t.shape) for t in pair] == [(1, 3, 4), ()] and tuple(flat.shape) == (1, 5)
    assert tuple(keywords["mask"].shape) == (1, 4) and keywords["mask"].dtype == torch.bool


@pytest.mark.parametrize(("error", "answered"), [
    ("running_mean should contain 12 elements not 128", True),
    ("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [12, 12]", True),
    ("mat1 and mat2 shapes cannot be multiplied (1x48 and 192x10)", True),
    ("not enough values to unpack (expected 4, got 3)", True),
    ("too many indices for tensor of dimension 2", True),
    ("For unbatched 2-D input, hx should also be 2-D but got 3-D tensor", True),
    ("index out of range in self", False),
    ("forward() got an unexpected keyword argument 'dim'", False),
    ("'NoneType' object has no attribute 'float'", False),
    ("expected scalar type Float but found Half", False),
])
def test_the_batch_axis_answers_errors_about_sizes_only(error: str, answered: bool) -> None:
    assert bool(_SHAPE_ERROR.search(error)) is answered


class _Transmittance(torch.nn.Module):
    def forward(self, alpha: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(1.0 - alpha, -1)


def test_a_prims_op_is_named_by_the_aten_op_it_was_decomposed_from(tmp_path: Path) -> None:
    # torch.cumprod reaches the dynamo exporter as prims.prod, which several aten ops decompose to
    # (tt-forge-onnx#1481): the decomposed graph's record of each node's original op names it.
    loaded = LoadedModel(model=_Transmittance(), args=(torch.rand(2, 5),), kwargs={})
    origin = decomposed_origin(loaded, "prims::prod", tmp_path / "model.py")
    assert origin["op"] == "aten::cumprod", origin
    assert decomposed_origin(loaded, "prims::erf_inv", tmp_path / "model.py") == {}


SORTFORMER = CORPUS / "scripted_concat_and_pad_slice_rank_streaming_sortformer_diarizer_nemo_15077.py"


def test_a_slice_bound_read_from_a_tensor_in_scripted_code_exports_with_the_symbolic(tmp_path: Path) -> None:
    # NVIDIA-NeMo/Speech#15077: `emb[b, :length[b]]` in a torch.jit.script function; the built-in
    # symbolic refuses the bound's unknown rank, the registered one reshapes it to one element.
    import onnxruntime as ort

    from onnxdoctor.analysis.fixes.rewrite import _SLICE_BOUNDS
    from onnxdoctor.worker.fixkit import run_code
    from onnxdoctor.worker.loader import load_script

    loaded = load_script(SORTFORMER, None)
    names = loaded.settings["input_names"]
    path = tmp_path / "sortformer.onnx"
    with pytest.raises(Exception, match="Rank must be 0 or 1"):
        torch.onnx.export(loaded.model, loaded.args, str(path), dynamo=False, opset_version=17)
    try:
        run_code(_SLICE_BOUNDS, loaded, "slice_bounds", tmp_path)
        torch.onnx.export(loaded.model, loaded.args, str(path), dynamo=False, opset_version=17, input_names=names)
    finally:
        for opset in range(10, 21):
            torch.onnx.unregister_custom_op_symbolic("aten::slice", opset)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: a.numpy() for n, a in zip(names, loaded.args, strict=True)})
    with torch.no_grad():
        expected = loaded.model(*loaded.args)
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(torch.from_numpy(have), want, atol=1e-5, rtol=1e-5)


def test_the_slice_symbolic_answers_the_rank_refusal_only() -> None:
    gate = _REFUSALS["aten::slice"]
    assert gate.search("the TorchScript exporter's symbolic for aten::slice refuses this call: Rank must be 0 or 1, not None")
    assert not gate.search("the TorchScript exporter's symbolic for aten::slice refuses this call: step!=1 is currently not supported")
