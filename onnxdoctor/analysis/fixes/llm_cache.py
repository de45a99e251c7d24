"""A transformers decoder exported with its key/value cache as flat tensors (OD211).

`use_cache=False` (fixes/outputs.py) gives a model for one forward pass; generating with it
recomputes the whole prefix at every token. Deployers need the cache in the graph: past keys and
values per layer as inputs, the updated ones as outputs, with dynamic batch, sequence and past
lengths. The fix wraps the model so forward() takes and returns those tensors and rebuilds
transformers' own `DynamicCache` from them inside (the route optimum's ONNX exports take).

transformers' export helpers were tried first: `transformers.integrations.executorch`'s
`register_dynamic_cache_export_support` lets torch.export take a `DynamicCache`, but with
transformers 5.25 and torch 2.13 the ONNX export of a model called with one fails in
decomposition ("Constant tensor lifted_tensor_4 is not in the constants dictionary"), and its
flattened inputs would carry pytree-derived names. The wrapper exports and is named.

An encoder-decoder (BART) gets two files: its decoder with the self-attention cache and the
cross-attention cache as tensors (the cross-attention keys/values are reused, not recomputed per
token), and its encoder, which computes the encoder's output and that cross-attention cache once
per source.

Verified by a greedy decode in ONNX Runtime (recipe step `DecodeCheck`): a prefill from an empty
past and three decode steps, at two prompt lengths, token for token against eager PyTorch.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import DecodeCheck, LoadCode, Recipe, UseExporter

CODES = ("OD211",)

FLAT_CACHE = '''import inspect

import torch
from transformers import DynamicCache


class FlatCacheDecoder(torch.nn.Module):
    """A decoder whose key/value cache is plain tensors: forward(input_ids, attention_mask,
    past_key_0, past_value_0, past_key_1, ...) -> (logits, present_key_0, present_value_0, ...)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        # transformers 5 calls the argument (and the output field) `cache`; 4.x `past_key_values`.
        parameters = inspect.signature(model.forward).parameters
        self.cache_name = "cache" if "cache" in parameters else "past_key_values"

    def forward(self, input_ids, attention_mask, *past):
        # transformers' own cache, rebuilt from the flat tensors (layer by layer: key, value).
        cache = DynamicCache(ddp_cache_data=list(zip(past[0::2], past[1::2])), config=self.model.config)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                         **{self.cache_name: cache})
        present = out[self.cache_name]
        return (out.logits, *[t for layer in present.layers for t in (layer.keys, layer.values)])


model = FlatCacheDecoder(model).train(model.training)
# Example inputs: batch 2, 4 new tokens after 3 past ones (sizes above 1, so none is specialised);
# the past's heads and head size come from the model's own cache.
with torch.no_grad():
    probe = model.model(input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True)[model.cache_name]
vocab = model.model.config.get_text_config(decoder=True).vocab_size
generator = torch.Generator().manual_seed(0)
example_kwargs = {}  # the wrapper takes everything positionally
example_inputs = (
    torch.randint(0, vocab, (2, 4), generator=generator),
    torch.ones(2, 3 + 4, dtype=torch.long),
    *[torch.randn(2, t.shape[1], 3, t.shape[3], generator=generator).to(t.dtype)
      for layer in probe.layers for t in (layer.keys, layer.values)],
)
layers = range(len(probe.layers))
input_names = ["input_ids", "attention_mask", *[f"past_{kv}_{i}" for i in layers for kv in ("key", "value")]]
output_names = ["logits", *[f"present_{kv}_{i}" for i in layers for kv in ("key", "value")]]
batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
past_sequence, total_sequence = torch.export.Dim("past_sequence"), torch.export.Dim("total_sequence")
dynamic_shapes = {
    "input_ids": {0: batch, 1: sequence},
    "attention_mask": {0: batch, 1: total_sequence},  # past + new tokens
    "past": tuple({0: batch, 2: past_sequence} for _ in example_inputs[2:]),
}
'''
SEQ2SEQ_CACHE = '''import inspect

import torch
from transformers import DynamicCache, EncoderDecoderCache


def cache_name(model: torch.nn.Module) -> str:
    # transformers 5 calls the argument (and the output field) `cache`; 4.x `past_key_values`.
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def flat(cache) -> list:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


class Seq2SeqEncoder(torch.nn.Module):
    """The encoder, and the decoder's cross-attention keys/values computed from its output once:
    forward(input_ids, attention_mask) -> (encoder_hidden_states, cross_key_0, cross_value_0, ...)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)[0]
        config = self.model.config
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        start = torch.full((input_ids.shape[0], 1), config.decoder_start_token_id, dtype=torch.long)
        # One decoder step fills the cross-attention cache (its logits are not needed).
        out = self.model(encoder_outputs=(hidden,), attention_mask=attention_mask, decoder_input_ids=start,
                         use_cache=True, **{cache_name(self.model): cache})
        return (hidden, *flat(out[cache_name(self.model)].cross_attention_cache))


class Seq2SeqDecoderWithCache(torch.nn.Module):
    """The decoder with its caches as plain tensors: forward(decoder_input_ids, encoder_hidden_states,
    attention_mask, past_key_0, past_value_0, ..., cross_key_0, cross_value_0, ...) ->
    (logits, present_key_0, present_value_0, ...); the cross-attention cache is reused as it is."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states, attention_mask, *past):
        own, cross = past[: len(past) // 2], past[len(past) // 2:]
        config = self.model.config
        cache = EncoderDecoderCache(DynamicCache(ddp_cache_data=list(zip(own[0::2], own[1::2])), config=config),
                                    DynamicCache(ddp_cache_data=list(zip(cross[0::2], cross[1::2])), config=config))
        out = self.model(encoder_outputs=(encoder_hidden_states,), attention_mask=attention_mask,
                         decoder_input_ids=decoder_input_ids, use_cache=True, **{cache_name(self.model): cache})
        return (out.logits, *flat(out[cache_name(self.model)].self_attention_cache))

    def encoder_export(self):
        """The encoder's export: (module, example inputs, torch.onnx.export options)."""
        batch, encoder_sequence = torch.export.Dim("batch"), torch.export.Dim("encoder_sequence")
        encoder = Seq2SeqEncoder(self.model).train(self.model.training)
        with torch.no_grad():
            layers = len(encoder(*self.encoder_inputs)) // 2
        return encoder, self.encoder_inputs, dict(
            dynamic_shapes={"input_ids": {0: batch, 1: encoder_sequence},
                            "attention_mask": {0: batch, 1: encoder_sequence}},
            input_names=["input_ids", "attention_mask"],
            output_names=["encoder_hidden_states",
                          *[f"cross_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]])


model = Seq2SeqDecoderWithCache(model).train(model.training)
# Example inputs: batch 2, a source of 6 tokens, 4 new decoder tokens after 3 past ones (sizes
# above 1, so none is specialised); the caches' heads and head size come from the model itself.
vocab = model.model.config.get_text_config(decoder=True).vocab_size
generator = torch.Generator().manual_seed(0)
model.encoder_inputs = (torch.randint(0, vocab, (2, 6), generator=generator), torch.ones(2, 6, dtype=torch.long))
with torch.no_grad():
    hidden, *cross = Seq2SeqEncoder(model.model)(*model.encoder_inputs)
example_kwargs = {}  # the wrapper takes everything positionally
example_inputs = (
    torch.randint(0, vocab, (2, 4), generator=generator), hidden, model.encoder_inputs[1],
    *[torch.randn(2, t.shape[1], 3, t.shape[3], generator=generator).to(t.dtype) for t in cross], *cross,
)
layers = range(len(cross) // 2)
names = [f"{kv}_{i}" for i in layers for kv in ("key", "value")]
input_names = ["decoder_input_ids", "encoder_hidden_states", "attention_mask",
               *[f"past_{n}" for n in names], *[f"cross_{n}" for n in names]]
output_names = ["logits", *[f"present_{n}" for n in names]]
batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
past_sequence, encoder_sequence = torch.export.Dim("past_sequence"), torch.export.Dim("encoder_sequence")
dynamic_shapes = {
    "decoder_input_ids": {0: batch, 1: sequence},
    "encoder_hidden_states": {0: batch, 1: encoder_sequence},
    "attention_mask": {0: batch, 1: encoder_sequence},  # the encoder's
    "past": tuple({0: batch, 2: past_sequence} for _ in cross) + tuple({0: batch, 2: encoder_sequence} for _ in cross),
}
'''
SEQ2SEQ_EXPORT = (
    "torch.onnx.export(model, example_inputs, 'decoder.onnx', dynamo=True, dynamic_shapes=dynamic_shapes,\n"
    "                  input_names=input_names, output_names=output_names)\n"
    "encoder, encoder_inputs, encoder_options = model.encoder_export()\n"
    "torch.onnx.export(encoder, encoder_inputs, 'encoder.onnx', dynamo=True, **encoder_options)\n"
    "# Generate: run encoder.onnx once on the source; then decoder.onnx from decoder_start_token_id,\n"
    "# with past_* of shape [batch, heads, 0, head_dim] at the first step and each step's present_*\n"
    "# after it; encoder_hidden_states, attention_mask and cross_* stay the same at every step.\n")
EXPORT = ("torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True, dynamic_shapes=dynamic_shapes,\n"
          "                  input_names=input_names, output_names=output_names)\n"
          "# Generate: feed past_* of shape [batch, heads, 0, head_dim] at the prefill, then each\n"
          "# step's present_* as the next step's past_*, with an attention_mask over past + new tokens.\n")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The flat-cache export for a transformers model with a `use_cache` switch: the decoder of a
    decoder-only model; the decoder and the encoder of an encoder-decoder."""
    if ctx.target_kind != "script":
        return []
    load = next((o for o in ctx.outcomes if o.stage is Stage.LOAD), None)
    if load is None or load.facts.get("config_use_cache") is None:
        return []
    if load.facts.get("config_is_encoder_decoder") is None:
        return []
    if load.facts["config_is_encoder_decoder"]:
        # The decoder is what generation runs step by step; the encoder runs once per source and
        # hands it the cross-attention cache.
        return [Fix(
            kind="flat_cache_seq2seq",
            title="Export the decoder with its self- and cross-attention caches as tensors, and the encoder "
                  "that computes the cross-attention cache (two files)",
            snippet=SEQ2SEQ_CACHE + SEQ2SEQ_EXPORT,
            applicability=Applicability.UNSAFE,
            cost="two ONNX files (encoder.onnx once per source, decoder.onnx once per token) whose inputs "
                 "and outputs are not forward()'s: the caller runs the decode loop, as optimum's "
                 "ORTModelForSeq2SeqLM does; the cross-attention keys/values are computed once, not per token",
            recipe=Recipe("flat_cache_seq2seq", (LoadCode(SEQ2SEQ_CACHE), UseExporter("dynamo"),
                                                 DecodeCheck(encoder=True)), isolated=True),
        )]
    return [Fix(
        kind="flat_cache",
        title="Export with the key/value cache as tensor inputs and outputs (a wrapper around DynamicCache)",
        snippet=FLAT_CACHE + EXPORT,
        # The ONNX model's inputs and outputs are not forward()'s: the caller feeds the cache.
        applicability=Applicability.UNSAFE,
        cost="the exported model takes past keys/values and returns the new ones: the caller runs the "
             "decode loop (optimum's ORTModelForCausalLM does the same); each token then costs one step, "
             "not a pass over the whole prefix",
        recipe=Recipe("flat_cache", (LoadCode(FLAT_CACHE), UseExporter("dynamo"), DecodeCheck()), isolated=True),
    )]
