"""The fast-path ("BetterTransformer") attention kernels, rewritten as the layers they fuse.

nn.MultiheadAttention and nn.TransformerEncoderLayer call these kernels in eval mode when their
checks pass, and code ported from them (fairseq's encoder layer) calls them directly; neither
exporter maps them. The rewrites compute the same layer from linear, matmul, softmax and
layer_norm.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ATTENTION = r'''
def _fast_path_attention(query, key, value, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                         proj_bias, mask, mask_type):
    """Multi-head attention on batch-first inputs: (output, attention weights per head)."""
    w_q, w_k, w_v = qkv_weight.chunk(3, 0)
    b_q, b_k, b_v = qkv_bias.chunk(3, 0)
    size = embed_dim // num_heads

    def heads(x, w, b):
        y = torch.nn.functional.linear(x, w, b)
        return y.reshape(y.shape[0], y.shape[1], num_heads, size).transpose(1, 2)

    q = heads(query, w_q, b_q) / math.sqrt(size)
    scores = q @ heads(key, w_k, b_k).transpose(-2, -1)  # (batch, heads, target, source)
    if mask is not None:
        # The kernels' mask types: 0 a (target, source) mask, 1 a (batch, source) padding mask,
        # 2 one that broadcasts to the scores. True marks a position left out.
        mask = mask.to(torch.bool)
        if mask_type == 0 and mask.dim() == 2:
            mask = mask.reshape(1, 1, mask.shape[-2], mask.shape[-1])
        elif mask_type == 1 and mask.dim() == 2:
            mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    out = (weights @ heads(value, w_v, b_v)).transpose(1, 2)
    out = out.reshape(out.shape[0], out.shape[1], embed_dim)
    return torch.nn.functional.linear(out, proj_weight, proj_bias), weights


def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    """torch._native_multi_head_attention: (output, weights) with weights averaged over heads
    when asked; an empty tensor stands for the weights not asked for."""
    out, weights = _fast_path_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                        proj_weight, proj_bias, mask, mask_type)
    if not need_weights:
        return out, out.new_zeros(0)
    return out, weights.mean(1) if average_attn_weights else weights


def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    """torch._transformer_encoder_layer_fwd: one encoder layer (self-attention and feed-forward,
    each with its residual and layer norm, before or after it), in eval mode (no dropout)."""
    def norm(x, weight, bias):
        return torch.nn.functional.layer_norm(x, (embed_dim,), weight, bias, eps)

    def attend(x):
        return _fast_path_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                    proj_bias, mask, mask_type)[0]

    def feed_forward(x):
        hidden = torch.nn.functional.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = torch.nn.functional.gelu(hidden) if use_gelu else torch.relu(hidden)
        return torch.nn.functional.linear(hidden, ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)
'''

REWRITES = (
    Rewrite(
        op="aten::_transformer_encoder_layer_fwd",
        family="attention",
        targets=("aten._transformer_encoder_layer_fwd.default",),
        function="transformer_encoder_layer_fwd",
        source=ATTENTION,
        exactness=Exactness.ROUNDING,
        error="the same layer from linear, matmul, softmax and layer_norm; the fused kernel sums in "
        "another order (rounding only)",
        limits="dense (not nested) batch-first inputs, as the kernel takes them; a row with every "
        "position masked gives NaN, as the kernel does",
    ),
    Rewrite(
        op="aten::_native_multi_head_attention",
        family="attention",
        targets=("aten._native_multi_head_attention.default",),
        function="native_multi_head_attention",
        source=ATTENTION,
        exactness=Exactness.ROUNDING,
        error="the same attention from linear, matmul and softmax; the fused kernel sums in another "
        "order (rounding only)",
        limits="dense (not nested) batch-first inputs; weights not asked for come back as an empty "
        "tensor (the kernel returns none); a row with every position masked gives NaN, as the CPU kernel does",
    ),
)
