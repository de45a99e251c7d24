"""General mechanisms for failures not seen before (issue 22), written after the fiftieth
first-seen batch (fixtures/corpus/first_seen_2026-12-06j.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.analysis.classify import extract_op
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# open-mmlab/mmcv#611: forward() has defaulted arguments that apply() leaves out, and the exporter
# calls symbolic(g, ...) with only the arguments apply() was given.
SHORT_APPLY = '''
import torch
dynamo = False

class ScaledShift(torch.autograd.Function):
    @staticmethod
    def symbolic(g, x, shift, scale, clamp):
        return g.op("acme::ScaledShift", x, shift, scale_f=scale, clamp_i=clamp)

    @staticmethod
    def forward(ctx, x, shift, scale=2.0, clamp=0):
        y = x * scale + shift
        return y.clamp(min=0) if clamp else y

class Model(torch.nn.Module):
    def forward(self, x):
        return ScaledShift.apply(x, x.mean(dim=-1, keepdim=True))

def get_model():
    return Model(), (torch.randn(2, 5),)
'''

# open-mmlab/mmdeploy#161: TOOD's deform_sampling passes the traced channel count as both `groups`
# and `deform_groups`, which g.op needs as ints.
TRACED_GROUPS = '''
import torch
dynamo = False

class GroupScale(torch.autograd.Function):
    @staticmethod
    def symbolic(g, x, weight, groups, deform_groups):
        return g.op("acme::GroupScale", x, weight, groups_i=groups, deform_groups_i=deform_groups)

    @staticmethod
    def forward(ctx, x, weight, groups, deform_groups):
        return x * weight.reshape(1, -1, 1, 1)

class Model(torch.nn.Module):
    def forward(self, x):
        b, c, h, w = x.shape
        return GroupScale.apply(x, x.new_ones(c), c, c)

def get_model():
    return Model(), (torch.randn(1, 4, 3, 3),)
'''


def test_the_function_a_symbolic_type_error_occurred_in_is_the_op() -> None:
    text = ("TypeError: ScaledShift.symbolic() missing 2 required positional arguments: 'scale' and 'clamp' "
            "(occurred when translating ScaledShift)")
    assert extract_op(text) == "ScaledShift"
    assert extract_op("TypeError: unsupported operand (occurred when translating Other)") == "Other"


@pytest.mark.slow
def test_a_symbolic_called_without_forwards_defaults_is_od205_and_exported_through_forward(tmp_path: Path) -> None:
    script = tmp_path / "short_apply.py"
    script.write_text(SHORT_APPLY)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    line = SHORT_APPLY.splitlines().index("    def symbolic(g, x, shift, scale, clamp):") + 1
    assert (finding.code, finding.op, finding.source) == ("OD205", "ScaledShift", f"short_apply.py:{line}"), finding
    assert "missing 2 required positional arguments: 'scale' and 'clamp'" in finding.message
    assert "same parameters and defaults as forward()" in finding.message
    best = finding.fixes[0]
    assert best.kind == "function_forward" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


@pytest.mark.slow
def test_one_traced_size_given_to_two_int_attributes_asks_parse_args_for_both(tmp_path: Path) -> None:
    script = tmp_path / "traced_groups.py"
    script.write_text(TRACED_GROUPS)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op, finding.onnx_op) == ("OD205", "GroupScale", "acme::GroupScale"), finding
    # torch adds attributes in sorted order: deform_groups_i is the one its error names.
    assert "passes `deform_groups` (and `groups`) to g.op as deform_groups_i" in finding.message
    assert '@parse_args("v", "v", "i", "i")' in finding.message


# huggingface/optimum-intel#913: Phi-3's LongRoPE picks its frequency factors with a Python `if` on
# a tensor; the tracer keeps the example's side, torch.export refuses to guess. The method is
# decorated and calls super(), as model code does.
FACTOR_BRANCH = '''
import torch
dynamo = {dynamo}

class Base(torch.nn.Module):
    def scale(self):
        return 2.0

class Rotary(Base):
    def __init__(self):
        super().__init__()
        self.register_buffer("short", torch.linspace(1.0, 2.0, 4))
        self.register_buffer("long", torch.linspace(3.0, 9.0, 4))
        self.__limit = 6

    @torch.no_grad()
    def forward(self, x, position_ids):
        seq_len = torch.max(position_ids) + 1
        if seq_len > self.__limit:
            factors = self.long * super().scale()
        else:
            factors = self.short
        return x * factors

def get_model():
    return Rotary(), (torch.randn(2, 4), torch.arange(4).unsqueeze(0))

def get_inputs2():
    return (torch.randn(2, 4), torch.arange(4, 8).unsqueeze(0))
'''


def test_an_assignment_only_branch_is_written_as_a_selection() -> None:
    from onnxdoctor.branches import edit_text

    source = FACTOR_BRANCH.format(dynamo=False)
    line = source.splitlines().index("        if seq_len > self.__limit:") + 1
    edit = edit_text(source, line)
    assert edit is not None and "factors = torch.where(condition, factors_if_true, factors_if_false)" in edit
    assert "factors_if_true = self.long * super().scale()" in edit
    # A side that writes an attribute is not a choice between values; one that returns is a choice
    # of the result, with the rest of the block as the other side (test_first_seen_batch132).
    guarded = "def f(x):\n    if x.sum() > 0:\n        return x\n    y = x\n    return y\n"
    assert "result = torch.where(condition, result_if_true, result_if_false)" in (edit_text(guarded, 2) or "")
    written = "def f(self, x):\n    if x.sum() > 0:\n        self.y = x\n    return x\n"
    assert edit_text(written, 2) is None
    # elif chains nest, and a name one side leaves alone keeps its value there.
    chain = ("def f(x):\n    a = x\n    if x.sum() > 0:\n        a = x * 2\n    elif x.mean() < -1:\n"
             "        a = -x\n    return a\n")
    text = edit_text(chain, 3)
    assert text is not None and "a_if_false = torch.where(condition_2, a_if_true_2, a)" in text


@pytest.mark.slow
@pytest.mark.parametrize(("dynamo", "code"), [(False, "OD210"), (True, "OD204")])
def test_a_tensor_branch_that_only_assigns_is_exported_as_a_selection(tmp_path: Path, dynamo: bool, code: str) -> None:
    script = tmp_path / "rotary.py"
    script.write_text(FACTOR_BRANCH.format(dynamo=dynamo))
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == code, [(f.code, f.message) for f in diagnosis.findings]
    where = next(f for f in finding.fixes if f.kind == "where_branch")
    assert where.verified is True, where.check
    assert "factors = torch.where(condition" in where.snippet


def test_nodes_that_lost_their_types_to_an_earlier_shape_error_are_folded_into_it() -> None:
    """pytorch#128505's Cohere block: one Add with incompatible dims, and every node after it
    "expected to have type but instead is null" (seven OD304s where one was the cause)."""
    from onnx import TensorProto, helper

    from onnxdoctor.onnxkit.checks import check_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["a"], name="/Add"),
                               helper.make_node("Relu", ["a"], ["b"], name="/Relu"),
                               helper.make_node("Softmax", ["b"], ["z"], name="/Softmax")], "g", [x, y], [z])
    found = check_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [(f.code, f.node) for f in found] == [("OD304", "/Add")], found
    assert found[0].message.endswith("2 nodes after it lost their input types with it (/Relu, /Softmax)")


# ultralytics/yolov5#2558: the Detect head caches its grid and rebuilds it only when the feature
# size changes; export.py's dry run fills the cache, so the trace never enters the rebuild.
CACHED_GRID = '''
import torch
dynamo = False
opset_version = 12
input_names = ["x"]
dynamic_axes = {"x": {2: "h", 3: "w"}}

class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.grid = torch.zeros(1)

    def forward(self, x):
        ny, nx = x.shape[2:4]
        if self.grid.shape[2:4] != x.shape[2:4]:
            yv, xv = torch.meshgrid([torch.arange(ny), torch.arange(nx)], indexing="ij")
            self.grid = torch.stack((xv, yv), 0).view(1, 2, ny, nx).float()
        return x.sigmoid() + self.grid

def get_model():
    model = Head()
    example = torch.randn(1, 2, 4, 6)
    model(example)  # the dry run
    return model, (example,)

def get_inputs2():
    return (torch.randn(1, 2, 5, 3),)
'''


@pytest.mark.slow
def test_a_grid_cached_by_a_dry_run_is_rebuilt_for_every_size(tmp_path: Path) -> None:
    script = tmp_path / "head.py"
    script.write_text(CACHED_GRID)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", [(f.code, f.message) for f in diagnosis.findings]
    forced = [f for f in finding.fixes if f.kind == "forced_branch" and f.verified]
    line = CACHED_GRID.splitlines().index("        if self.grid.shape[2:4] != x.shape[2:4]:") + 1
    # The tuple comparison asks `==` of each size pair: read one way, every size rebuilds the grid.
    assert forced and f"size comparison at head.py:{line}" in forced[0].title, [(f.kind, f.check) for f in finding.fixes]


@pytest.mark.slow
def test_a_frozen_shape_constant_is_named_by_the_reshape_that_takes_it() -> None:
    """open-mmlab/mmpretrain#1273: window_reverse's `int(windows.shape[0] / (H * W / ws / ws))`
    freezes the batch into a view's shape; the first value that differs at another batch is that
    shape's Constant, and the op holding it is the Reshape it is assembled into."""
    script = CORPUS / "window_reverse_int_frozen_batch_swin_classifier_dynamic_batch_mmpretrain_1273.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.torch_op, finding.onnx_op) == ("OD210", "aten::view", "Reshape"), finding
    assert finding.node and "Reshape" in finding.node and "Constant" in finding.message
