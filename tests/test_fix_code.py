"""A fix's code runs as if pasted into the user's script: what it leaves replaces the example."""

from __future__ import annotations

import torch

from onnxdoctor.worker.fixkit import apply_load_code
from onnxdoctor.worker.loader import LoadedModel


def _loaded() -> LoadedModel:
    return LoadedModel(model=torch.nn.Identity(), args=(torch.ones(1, 3, dtype=torch.float16),),
                       kwargs={"mask": torch.ones(1, 3, dtype=torch.bool)}, factory="get_model")


def test_fix_code_that_changes_the_positional_inputs_keeps_the_keyword_ones() -> None:
    loaded = _loaded()
    mask = loaded.kwargs["mask"]
    apply_load_code("example_inputs = tuple(t.float() for t in example_inputs)\n", loaded, "cast")
    assert loaded.args[0].dtype == torch.float32
    assert list(loaded.kwargs) == ["mask"] and loaded.kwargs["mask"] is mask


def test_fix_code_that_builds_new_inputs_says_which_keyword_inputs_go_with_them() -> None:
    loaded = _loaded()
    apply_load_code("example_kwargs = {}\nexample_inputs = (torch.zeros(2, 3),)\n", loaded, "wrap")
    assert loaded.kwargs == {} and loaded.args[0].shape == (2, 3)
    loaded = _loaded()
    apply_load_code("example_kwargs = dict(example_kwargs, scale=torch.tensor(2.0))\n"
                    "example_inputs = (torch.zeros(2, 3),)\n", loaded, "wrap")
    assert sorted(loaded.kwargs) == ["mask", "scale"]
