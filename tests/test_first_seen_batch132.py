"""General mechanisms for failures not seen before (issue 22), written after the hundred-and-thirty-second
and later first-seen batches (fixtures/corpus/first_seen_2026-12-10f.txt on)."""

from __future__ import annotations

import runpy
from pathlib import Path

import torch
from diagnosed import diagnosed, first_finding

from onnxdoctor.branches import edit_text, size_int_edit

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


# A sparse up-sampling matrix the model holds as a plain attribute and reads the parts of
# (HandMesh#31's spiral decoder): the tracer stops at the sparse constant without naming an op.
HELD_SPARSE_PARTS = '''import torch

dynamo = False


def up_transform():
    rows = torch.tensor([0, 0, 1, 2, 2, 3])
    cols = torch.tensor([0, 1, 1, 0, 2, 2])
    vals = torch.tensor([0.5, 0.5, 1.0, 0.3, 0.7, 1.0])
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (4, 3)).coalesce()


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trans = up_transform()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        row, col = self.trans._indices()
        value = self.trans._values().unsqueeze(-1)
        out = torch.index_select(x, 1, col) * value
        index = row.view(1, -1, 1).expand_as(out)
        up = torch.zeros(x.size(0), self.trans.size(0), x.size(2)).scatter_add(1, index, out)
        return self.lin(up)


def get_model():
    torch.manual_seed(0)
    return Decoder().eval(), (torch.randn(2, 3, 2),)
'''

# Two range checks that only print, on tensor values, before a complex STFT the TorchScript
# exporter refuses (FCPE#9's mel extractor): the dynamo exporter stops at the first check, and,
# that one decided, at the second.
PRINTING_CHECKS_BEFORE_COMPLEX_STFT = '''import torch

dynamo = False
opset_version = 17


class Mel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(16))
        self.proj = torch.nn.Linear(9, 4)

    def forward(self, y):
        if torch.min(y) < -1.0:
            print("min value is", torch.min(y))
        if torch.max(y) > 1.0:
            print("max value is", torch.max(y))
        spec = torch.stft(y, 16, hop_length=4, window=self.window, center=False, return_complex=True)
        mag = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
        return self.proj(mag.transpose(-1, -2))


def get_model():
    torch.manual_seed(0)
    return Mel().eval(), (torch.rand(1, 64) - 0.5,)


def get_inputs2():
    return (torch.randn(1, 64) * 2,)
'''


def test_the_parts_of_a_held_sparse_matrix_are_read_as_constants(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, HELD_SPARSE_PARTS, "OD299")
    assert finding.op == "aten::_indices", finding.op  # named from the call at the user's line
    fix = next(f for f in finding.fixes if f.kind == "dense_sparse")
    assert fix.verified, fix.check
    assert "(trans)" in fix.title and "_indices()" in fix.snippet


def test_a_chain_decides_one_data_dependent_check_after_another(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, PRINTING_CHECKS_BEFORE_COMPLEX_STFT, "OD299")
    assert finding.op == "aten::stft"
    chained = [f for f in finding.fixes if f.verified and "; then" in f.title]
    assert chained, [(f.title, f.check) for f in finding.fixes]
    assert "model.py:14" in chained[0].title and "model.py:16" in chained[0].title


# FBCNN's padding to a multiple of 8 (vs-mlrt#83), height and width declared dynamic: numpy turns
# the traced size into an array, and int() of it is the example's number.
NUMPY_PADDING_TO_A_MULTIPLE = '''import math

import numpy as np
import torch
import torch.nn.functional as F

dynamo = False
input_names = ["image"]
output_names = ["restored"]
dynamic_axes = {"image": {2: "height", 3: "width"}, "restored": {2: "height", 3: "width"}}


class Restorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 3, 2, stride=2)

    def forward(self, x):
        h, w = x.size()[-2:]
        bottom = int(np.ceil(h / 8) * 8 - h)
        right = int(math.ceil(w / 8) * 8 - w)
        padded = F.pad(x, (0, right, 0, bottom), mode="replicate")
        y = self.up(torch.relu(self.down(padded)))
        return y[..., :h, :w] + x


def get_model():
    torch.manual_seed(0)
    return Restorer().eval(), (torch.randn(1, 3, 32, 48),)
'''


def test_numpy_and_math_of_a_traced_size_are_computed_by_torch(tmp_path: Path) -> None:
    findings = diagnosed(tmp_path, NUMPY_PADDING_TO_A_MULTIPLE).findings
    finding = next(f for f in findings if f.code in ("OD802", "OD803"))  # fails or differs
    fix = next(f for f in finding.fixes if f.kind == "traced_size_int")
    assert fix.verified, fix.check
    assert "torch.ceil(torch.as_tensor(h / 8, dtype=torch.float64))" in fix.snippet
    assert "torch.ceil(torch.as_tensor(w / 8, dtype=torch.float64))" in fix.snippet  # math.ceil too


def test_the_size_edit_writes_numpy_functions_as_torch_ones_with_each_value_a_tensor() -> None:
    source = "def f(x, h, w):\n    p = int(np.maximum(h, w) - np.floor(h / 3))\n"
    _line, edited = size_int_edit(source, 2)  # type: ignore[misc]
    assert edited == ("    p = torch.as_tensor(torch.maximum(torch.as_tensor(h, dtype=torch.float64), "
                      "torch.as_tensor(w, dtype=torch.float64)) - torch.floor(torch.as_tensor(h / 3, "
                      "dtype=torch.float64)), dtype=torch.float64).long()"), edited
    # The edit is eager code that gives int()'s number.
    p = eval(edited.split("= ", 1)[1], {"torch": torch, "h": 7, "w": 5})
    assert int(p) == 7 - 2


# DynamicDet's router (VDIGPKU/DynamicDet#5): an easy image returns after the first backbone, a
# hard one goes on through the second; traced, the graph holds the example's path only.
EARLY_RETURN_ROUTER = '''import torch

dynamo = False


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)
        self.score = torch.nn.Linear(4, 1)

    def forward(self, x):
        h = torch.relu(self.first(x))
        if torch.sigmoid(self.score(x)).mean() < 0.5:
            return h * 2
        h2 = self.second(h)
        return h2 - 1


def get_model():
    torch.manual_seed(0)
    model = Router().eval()
    with torch.no_grad():
        model.score.weight.fill_(1.0)
        model.score.bias.zero_()
    return model, (torch.full((1, 4), 2.0),)


def get_inputs2():
    return (torch.full((1, 4), -2.0),)
'''


def test_an_if_that_returns_early_selects_the_result_of_both_paths(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, EARLY_RETURN_ROUTER, "OD210")
    fix = next(f for f in finding.fixes if f.kind == "where_branch")
    assert fix.verified, fix.check
    assert "result = torch.where(condition, result_if_true, result_if_false)" in fix.snippet
    assert fix.snippet.rstrip().endswith("return result")
    assert "h2 = torch.where" not in fix.snippet  # only the returned value is selected


def test_a_returning_if_is_rewritten_only_where_both_paths_end_in_one_return() -> None:
    rest_without_return = "def f(x):\n    if x.sum() > 0:\n        return x\n    for i in range(2):\n        x = x + i\n"
    assert edit_text(rest_without_return, 2) is None  # the rest does not end in a return
    early_twice = "def f(x):\n    if x.sum() > 0:\n        if x.max() > 1:\n            return x\n        return -x\n    return x * 0\n"
    nested = edit_text(early_twice, 2) or ""
    assert "result_if_true_2 = torch.where(condition_2, " in nested and nested.rstrip().endswith("return result")
    in_a_loop = "def f(x):\n    if x.sum() > 0:\n        for i in range(2):\n            return x\n    return x * 0\n"
    assert edit_text(in_a_loop, 2) is None  # a return inside a loop


# A feature embedding that seeds its own draws in forward() (TabPFN#97): PyTorch gives the same
# numbers on every call, ONNX Runtime's RandomNormalLike nodes new ones.
SEEDED_DRAWS = '''import torch

dynamo = False


class Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        torch.manual_seed(42)
        for _ in range(3):
            x = x + 0.1 * torch.randn(x.shape)
        return self.proj(x + torch.rand_like(x))


def get_model():
    torch.manual_seed(0)
    return Embedding().eval(), (torch.randn(2, 4),)
'''


def test_random_draws_become_inputs_the_caller_draws(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, SEEDED_DRAWS, "OD601")
    fix = next(f for f in finding.fixes if f.kind == "noise_inputs")
    assert fix.verified, fix.check
    assert fix.check.max_abs_diff is not None and fix.check.max_abs_diff < 1e-5
    # The wrapper records the four draws and takes them after the model's one input.
    model, example_inputs = runpy.run_path(str(tmp_path / "model.py"))["get_model"]()
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(fix.recipe.steps[0].code, "utf-8")  # type: ignore[union-attr]
    scope = runpy.run_path(str(wrapper), init_globals={"model": model, "example_inputs": example_inputs,
                                                        "example_kwargs": {}})
    wrapped = scope["model"]
    assert [(kind, tuple(value.shape)) for kind, value in wrapped.recorded] == [("randn", (2, 4))] * 3 + [("rand", (2, 4))]
    assert len(scope["example_inputs"]) == 5
    # forward() seeds its draws: the noise to feed is the recorded numbers, which give the model's own output.
    assert wrapped.seeded
    with torch.no_grad():
        assert torch.equal(wrapped(*scope["example_inputs"]), model(*example_inputs))
        try:
            wrapped(*example_inputs)  # no noise given: a clear error, not an IndexError
        except RuntimeError as exc:
            assert "drew more than the 4 numbers" in str(exc)
        else:
            raise AssertionError("the wrapper ran without its noise inputs")


# Poincaré embeddings kept in the unit ball by max_norm (pytorch#72738): the renorm writes the
# weight in place, untraced, so the export holds the example's rows rescaled and the others not.
RENORMED_EMBEDDING = '''import torch

dynamo = False


class Entities(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(16, 4, max_norm=1.0)
        with torch.no_grad():
            self.table.weight.mul_(3.0)

    def forward(self, ids):
        return self.table(ids).sum(1)


def get_model():
    torch.manual_seed(0)
    return Entities().eval(), (torch.tensor([[0, 1, 2]]),)


def get_inputs2():
    return (torch.tensor([[5, 6, 7]]),)
'''


def test_an_embedding_s_max_norm_rescales_the_looked_up_rows_in_the_graph(tmp_path: Path) -> None:
    finding = next(f for f in diagnosed(tmp_path, RENORMED_EMBEDDING).findings if f.code in ("OD210", "OD803"))
    fix = next(f for f in finding.fixes if f.kind == "renormed_embeddings")
    assert fix.verified, fix.check
    assert "(table)" in fix.title


def test_an_openvino_error_naming_a_node_by_its_output_port_names_the_op() -> None:
    # OpenVINO's CPU plugin names a node by its output and port ("component.0", openvino#19344),
    # here a Multinomial whose output the export named `component`.
    import onnx.helper as oh

    from onnxdoctor.worker.openvino_target import error_node

    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["h"], name="/Relu"),
                           oh.make_node("Multinomial", ["h"], ["component"], name="/Multinomial")], "g",
                          [oh.make_tensor_value_info("x", 1, [1, 4])], [oh.make_tensor_value_info("component", 6, [1, 1])])
    model = oh.make_model(graph)
    message = "[CPU] Multinomial node with name 'component.0' has incorrect number of output edges."
    assert error_node(model, message) == {"op": "Multinomial", "node": "/Multinomial"}
    assert error_node(model, "[CPU] Relu node with name 'h.0' failed") == {"op": "Relu", "node": "/Relu"}
    assert error_node(model, "[CPU] node with name 'other.0' failed") is None


# Two early returns in one forward(): the example meets the first only; decided, the second is
# met next, and the chain's one rewrite of the function takes both (the later one first).
TWO_EARLY_RETURNS = '''import torch

dynamo = False


class Gate(torch.nn.Module):
    def forward(self, *inputs):  # *args: no TorchScript, so no scripted route before the selections
        x = inputs[0]
        s = x.mean()
        if s > 1.0:
            return x * 2, s
        if s < -1.0:
            return x * 3, s
        return x - 1, s


def get_model():
    return Gate().eval(), (torch.full((2, 3), 2.0),)


def get_inputs2():
    return (torch.full((2, 3), -2.0),)
'''


def test_two_early_returns_in_one_function_are_both_selected(tmp_path: Path) -> None:
    finding = first_finding(tmp_path, TWO_EARLY_RETURNS, "OD210")
    verified = [f for f in finding.fixes if f.verified]
    assert verified and "where_branch" in verified[0].recipe.key(), [(f.kind, f.check) for f in finding.fixes]  # type: ignore[union-attr]
