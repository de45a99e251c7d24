"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-thirty-second
and later first-seen batches (fixtures/corpus/first_seen_2026-12-10f.txt on)."""

from __future__ import annotations

from pathlib import Path

from diagnosed import first_finding

# forward() joins a 2-D query with 3-D features (SenseVoice's emotion and event queries, as in
# sensevoice#35): torch.cat raises in C++, which leaves no frame of its own in the traceback.
CAT_OF_MISMATCHED_RANKS = '''import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query = torch.nn.Parameter(torch.zeros(1, 8))

    def forward(self, feats):
        h = torch.relu(feats)
        return torch.cat([self.query, h], dim=1)


def get_model():
    return Head().eval(), (torch.randn(1, 5, 8),)
'''

# The same place, but forward() raises its own error from Python after an op that worked.
OWN_ERROR_AFTER_AN_OP = '''import torch


class Head(torch.nn.Module):
    def forward(self, feats):
        h = torch.cat([feats, feats], dim=1)
        if h.shape[1] != 3:
            raise ValueError("expected three frames")
        return h


def get_model():
    return Head().eval(), (torch.randn(1, 5, 8),)
'''

# The model catches the op's error and raises one of its own: the op is not what failed.
CAUGHT_AND_RERAISED = '''import torch


class Head(torch.nn.Module):
    def forward(self, feats):
        try:
            return torch.cat([feats[0], feats], dim=1)
        except RuntimeError:
            raise TypeError("feats must be a list of tensors") from None


def get_model():
    return Head().eval(), (torch.randn(1, 5, 8),)
'''


def test_the_op_forward_raised_in_is_named(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, CAT_OF_MISMATCHED_RANKS, "OD108", fix=False)
    assert finding.op == "aten::cat", finding
    assert finding.source is not None and finding.source.endswith("model.py:11")


def test_no_op_is_named_for_the_model_s_own_error(tmp_path: Path) -> None:
    for name, source in (("own", OWN_ERROR_AFTER_AN_OP), ("caught", CAUGHT_AND_RERAISED)):
        folder = tmp_path / name
        folder.mkdir()
        finding = first_finding(folder, source, "OD108", fix=False)
        assert finding.op is None, (name, finding.op)
