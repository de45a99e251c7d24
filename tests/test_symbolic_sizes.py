"""Sizes read off a shape and put in a tensor (recipe.EagerExport.symbolic_sizes): Deformable-DETR's
`torch.as_tensor(spatial_shapes)` read back in a loop, `torch.linspace` with a size for its count."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.recipe import EagerExport
from tests.test_first_seen_batch14 import _diagnosed

# Two feature levels whose (h, w) go through torch.as_tensor and are read back by iterating the
# tensor (split sizes, reshape grids) and by linspace (reference points): the TorchScript export
# stores the example's sizes and fails or differs at any other H/W (GroundingDINO#258's shape).
LEVELS = '''
import torch
import torch.nn as nn

dynamo = False
opset_version = 17
input_names = ["image"]
dynamic_axes = {"image": {2: "height", 3: "width"}}


class Levels(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.down = nn.Conv2d(8, 8, 3, 2, 1)

    def forward(self, image):
        f1 = self.stem(image)
        feats = [f1, self.down(f1)]
        shapes = torch.as_tensor([f.shape[-2:] for f in feats], dtype=torch.long)
        flat = torch.cat([f.flatten(2) for f in feats], 2)
        out = []
        for part, (h, w) in zip(flat.split([h * w for h, w in shapes], 2), shapes):
            ys = torch.linspace(0.5, h - 0.5, h)
            grid = part.reshape(1, 8, h, w) * ys.view(1, 1, -1, 1) / h
            out.append(grid.mean((2, 3)))
        return torch.cat(out, 1) + shapes.sum().to(torch.float32)


def get_model():
    torch.manual_seed(0)
    return Levels().eval(), (torch.randn(1, 3, 64, 96),)


def get_inputs2():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 64),)
'''


@pytest.mark.slow
def test_sizes_put_in_a_tensor_and_read_back_stay_symbolic_under_the_dynamo_exporter(tmp_path: Path) -> None:
    # Every fix checked: the TorchScript exporter's own route (`tensor_values`: torch.as_tensor of
    # the traced sizes stacked) also holds at other sizes, and ranks first.
    diagnosis = _diagnosed(tmp_path, LEVELS, fix=True, all_fixes=True)
    finding = diagnosis.findings[0]
    assert finding.code in ("OD802", "OD803")
    assert next(f for f in finding.fixes if f.kind == "tensor_values").verified is True
    fix = next(f for f in finding.fixes if f.kind == "symbolic_sizes")
    assert fix.verified is True, fix.check
    # Checked at sizes other than the example's, not only at the example.
    assert fix.check is not None and fix.check.sizes
    # The plain dynamo exporter (no patch) is refused on the same model: the patch is what works.
    plain = next(f for f in finding.fixes if f.kind == "exporter")
    assert plain.verified is not True


def test_the_patch_leaves_plain_numbers_alone_and_is_undone() -> None:
    import torch

    from onnxdoctor.worker.fixkit import eager_export
    from onnxdoctor.worker.loader import LoadedModel

    iterate, index = torch.Tensor.__iter__, torch.Tensor.__getitem__
    loaded = LoadedModel(model=torch.nn.Identity(), args=(), kwargs={})
    with eager_export(loaded, EagerExport(symbolic_sizes=True)):
        # No SymInt in sight (eager, not under torch.export): torch's own constructors answer.
        plain = torch.as_tensor([(2, 3), (4, 5)])
        assert plain.dtype == torch.int64 and [tuple(r.tolist()) for r in plain] == [(2, 3), (4, 5)]
        assert torch.linspace(0, 1, 5).tolist() == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    assert torch.Tensor.__iter__ is iterate and torch.Tensor.__getitem__ is index
