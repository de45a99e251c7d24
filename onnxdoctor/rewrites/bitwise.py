"""Integer bitwise ops (and, or, xor, shifts) in integer arithmetic, and the float32/int32 bit
reinterpretation (`Tensor.view(dtype)`) in exact arithmetic.

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

BITCAST = r'''
def _float_bits(x):
    """The IEEE-754 bit pattern of float32 values as int32, computed exactly: sign, exponent from
    log2 corrected to the power of two below the value, mantissa as an integer; subnormals, zeros
    (-0.0 included) and infinities exactly, every NaN as the canonical quiet NaN."""
    a = x.abs()
    two = torch.full_like(a, 2.0)  # a tensor base: run_decompositions cannot lift a scalar one
    negative = (x < 0) | ((x == 0) & (torch.reciprocal(x) < 0))
    normal = a >= 2.0 ** -126
    safe = torch.where(normal & torch.isfinite(a), a, torch.ones_like(a))
    e = torch.floor(torch.log2(safe))
    e = torch.where(torch.pow(two, e) > safe, e - 1, e)
    e = torch.where(torch.pow(two, e + 1) <= safe, e + 1, e)
    mantissa = torch.where(normal, (safe / torch.pow(two, e) - 1) * 2.0 ** 23, a * 2.0 ** 126 * 2.0 ** 23)
    exponent = torch.where(normal, e + 127, torch.zeros_like(e))
    bits = exponent.to(torch.int64) * 2 ** 23 + mantissa.to(torch.int64)
    bits = torch.where(torch.isinf(a), torch.full_like(bits, 255 * 2 ** 23), bits)
    bits = torch.where(torch.isnan(x), torch.full_like(bits, 0x7FC00000), bits)
    bits = bits + negative.to(torch.int64) * 2 ** 31
    return torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits).to(torch.int32)


def _bits_float(b):
    """int32 bit patterns as the float32 values they hold (NaN payloads are not kept)."""
    u = b.to(torch.int64)
    u = torch.where(u < 0, u + 2 ** 32, u)
    sign = torch.where(u >= 2 ** 31, -1.0, 1.0)
    u = torch.remainder(u, 2 ** 31)
    exponent = torch.div(u, 2 ** 23, rounding_mode="floor")
    mantissa = torch.remainder(u, 2 ** 23).to(torch.float32)
    normal = (1.0 + mantissa * 2.0 ** -23) * torch.pow(torch.full_like(mantissa, 2.0),
                                                       (exponent - 127).clamp(-126, 127).to(torch.float32))
    value = torch.where(exponent == 0, mantissa * 2.0 ** -126 * 2.0 ** -23, normal)
    value = torch.where(exponent == 255, torch.where(mantissa == 0, float("inf"), float("nan")), value)
    return (sign * value).to(torch.float32)


def view_dtype(x, dtype):
    """Tensor.view(dtype) between float32 and int32: the same bits read as the other type."""
    if x.dtype == dtype:
        return x
    if x.dtype == torch.float32 and dtype == torch.int32:
        return _float_bits(x)
    if x.dtype == torch.int32 and dtype == torch.float32:
        return _bits_float(x)
    return NotImplemented
'''

REWRITES = (
    Rewrite(
        op="aten::view.dtype",
        family="bitwise",
        targets=("aten.view.dtype",),
        function="view_dtype",
        source=BITCAST,
        exactness=Exactness.EXACT,
        error="the same bits for every float32 value and int32 pattern, NaN apart (every NaN reads as "
        "the canonical quiet NaN 0x7FC00000, and a NaN pattern's payload is not kept)",
        limits="float32 <-> int32 only (other pairs, and views that change the last dim's size, stay as "
        "they are); about 30 ONNX nodes per view",
        # The TorchScript tracer's alias analysis names no overload: a dtype is its int argument.
        when=r"overload='dtype'|view\.dtype|\.view\(torch\.(?:int32|float32)\)"
        r"|op for aten::view but it isn't a special case\.\s+Argument types: Tensor, int,",
    ),
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
