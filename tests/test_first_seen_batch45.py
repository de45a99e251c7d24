"""General mechanisms for failures not seen before (issue 22), written after the forty-fifth
first-seen batch (fixtures/corpus/first_seen_2026-12-06e.txt)."""

from __future__ import annotations

from onnxdoctor.analysis.classify import extract_op


def test_a_call_no_overload_takes_names_the_function() -> None:
    # transformers#26790: traced sizes reach F.interpolate as a tuple of tensors.
    text = ("TypeError: upsample_bicubic2d() received an invalid combination of arguments - got "
            "(Tensor, NoneType, bool, tuple), but expected one of:")
    assert extract_op(text) == "aten::upsample_bicubic2d"
    # The argument-type wording keeps working beside it; a method's or a module's words do not match.
    assert extract_op("TypeError: scaled_dot_product_attention(): argument 'is_causal' must be bool, not Tensor") \
        == "aten::scaled_dot_product_attention"
    assert extract_op("TypeError: forward() missing 1 required positional argument: 'x'") is None


def test_a_jit_pass_error_that_starts_with_a_node_kind_names_it() -> None:
    # mlcommons/inference#637: a scripted RNN-T prediction net with an optional (h, c) tuple.
    assert extract_op("RuntimeError: prim::TupleIndex not matched to tuple construct") == "prim::TupleIndex"
    assert extract_op("prim::TupleIndex not matched to tuple construct") == "prim::TupleIndex"
    # An op mentioned later in a sentence is not the subject of the error.
    assert extract_op("RuntimeError: the value came from aten::foo here") is None
