"""Integer bitwise ops (and, or, xor, shifts) in integer arithmetic.

The TorchScript exporter refuses `&`, `|`, `^` on anything but bool ("ONNX export does NOT support
exporting bitwise AND for non-boolean input values"); the dynamo exporter maps them, but lowers a
uint8 right shift through an int8 cast that leaves the graph with mixed int8/uint8 types the ONNX
checker rejects (onnxruntime#2207's 4-bit unpacking, `x & 15` and `x >> 4`, fails so on torch 2.13).
Here every op is computed in int64 with Mod/Div/Mul/Add, which both runtimes have for integers,
and cast back to the op's result type.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

BITWISE = r'''
_BITS = {torch.uint8: 8, torch.int8: 8, torch.int16: 16, torch.int32: 32}


def _result_dtype(x, other):
    return torch.result_type(x, other) if isinstance(other, torch.Tensor) else x.dtype


def _pattern(value, dtype):
    # The value's two's-complement bit pattern as a non-negative int64 (below 2**bits).
    value = torch.as_tensor(value).to(torch.int64)
    return torch.remainder(value, 2 ** _BITS[dtype])


def _from_pattern(pattern, dtype):
    # Back from a bit pattern to the dtype's values (the top bit of a signed type is negative).
    if dtype in (torch.int8, torch.int16, torch.int32):
        bits = _BITS[dtype]
        pattern = torch.where(pattern >= 2 ** (bits - 1), pattern - 2 ** bits, pattern)
    return pattern.to(dtype)


def _low_bits_mask(other):
    # `x & (2**k - 1)` is `x mod 2**k` for every integer x, whatever its width or sign.
    return isinstance(other, int) and not isinstance(other, bool) and other >= 0 and (other & (other + 1)) == 0


def _combine(x, other, how):
    dtype = _result_dtype(x, other)
    if dtype == torch.bool:
        other = torch.as_tensor(other, dtype=torch.bool)
        return {"and": torch.logical_and, "or": torch.logical_or, "xor": torch.logical_xor}[how](x, other)
    if how == "and" and _low_bits_mask(other):
        return torch.remainder(x.to(torch.int64), other + 1).to(dtype)
    if dtype not in _BITS:
        raise NotImplementedError(f"bitwise {how} rewrite: {dtype} operands other than a 2**k - 1 mask")
    a, b = _pattern(x, dtype), _pattern(other, dtype)
    result = torch.zeros_like(a + b)
    for bit in range(_BITS[dtype]):  # one bit at a time: exact, 8 to 32 steps
        # Bit `bit` is set when the low bit+1 bits reach 2**bit: Mod and a compare, no division
        # (the dynamo exporter divides integers in float32, which rounds above 2**24).
        a_bit = (torch.remainder(a, 2 ** (bit + 1)) >= 2 ** bit).to(torch.int64)
        b_bit = (torch.remainder(b, 2 ** (bit + 1)) >= 2 ** bit).to(torch.int64)
        if how == "and":
            both = a_bit * b_bit
        elif how == "or":
            both = a_bit + b_bit - a_bit * b_bit
        else:
            both = a_bit + b_bit - 2 * a_bit * b_bit
        result = result + both * 2 ** bit
    return _from_pattern(result, dtype)


def bitwise_and(x, other):
    """x & other for integer (and bool) tensors."""
    return _combine(x, other, "and")


def bitwise_or(x, other):
    """x | other for integer (and bool) tensors."""
    return _combine(x, other, "or")


def bitwise_xor(x, other):
    """x ^ other for integer (and bool) tensors."""
    return _combine(x, other, "xor")


def _power_of_two(shift):
    if isinstance(shift, torch.Tensor):
        return torch.pow(torch.full_like(shift.to(torch.int64), 2), shift.to(torch.int64))
    return 2 ** int(shift)


def bitwise_right_shift(x, shift):
    """x >> shift: floor division by 2**shift (arithmetic for signed types, as torch does)."""
    dtype = _result_dtype(x, shift)
    wide = x.to(torch.int64)
    step = _power_of_two(shift)
    # floor_divide stays integer in ONNX (div with a rounding mode goes through float32); the
    # numerator is a multiple of d, so the quotient is exact whatever the rounding.
    return torch.floor_divide(wide - torch.remainder(wide, step), step).to(dtype)


def bitwise_left_shift(x, shift):
    """x << shift, wrapped to the dtype's width as torch's kernel wraps it."""
    dtype = _result_dtype(x, shift)
    if dtype not in _BITS:
        raise NotImplementedError(f"left shift rewrite: {dtype}")
    return _from_pattern(torch.remainder(x.to(torch.int64) * _power_of_two(shift), 2 ** _BITS[dtype]), dtype)
'''

_AND = ("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar", "aten.__and__.Tensor", "aten.__and__.Scalar")
_OR = ("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar", "aten.__or__.Tensor", "aten.__or__.Scalar")
_XOR = ("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar", "aten.__xor__.Tensor", "aten.__xor__.Scalar")
_RIGHT = ("aten.bitwise_right_shift.Tensor", "aten.bitwise_right_shift.Tensor_Scalar",
          "aten.__rshift__.Tensor", "aten.__rshift__.Scalar")
_LEFT = ("aten.bitwise_left_shift.Tensor", "aten.bitwise_left_shift.Tensor_Scalar",
         "aten.__lshift__.Tensor", "aten.__lshift__.Scalar")

REWRITES = (
    Rewrite(
        # One entry for the whole family: code that masks usually shifts too (4-bit unpacking), and
        # the failure names only the first op the exporter met.
        op="aten::bitwise_and",
        family="bitwise",
        targets=(*_AND, *_OR, *_XOR, *_RIGHT, *_LEFT),
        function="bitwise_and",
        functions=(*["bitwise_and"] * 4, *["bitwise_or"] * 4, *["bitwise_xor"] * 4,
                   *["bitwise_right_shift"] * 4, *["bitwise_left_shift"] * 4),
        source=BITWISE,
        exactness=Exactness.EXACT,
        error="same integers (and, or, xor, >> and << all rewritten, in int64 Mod/Div/Mul/Add)",
        limits="uint8/int8/int16/int32 operands; int64 only for `& (2**k - 1)` masks and right "
        "shifts (the rewrite raises for the rest); shift amounts must be below 32; general "
        "and/or/xor cost about 6 ONNX nodes per bit of the dtype",
        reported_as=("aten::bitwise_or", "aten::bitwise_xor", "aten::bitwise_right_shift",
                     "aten::bitwise_left_shift"),
        named_by_failure=True,
    ),
)
