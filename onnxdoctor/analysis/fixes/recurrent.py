"""Recurrent layers with options the exporters miss: LSTM with `proj_size`, rewritten as exportable ops.

The TorchScript exporter refuses an LSTM with projections ("LSTMs with projections") and the
dynamo exporter writes an ONNX LSTM node whose initial cell state has the projected size, which
ONNX Runtime refuses at run time. The rewrite computes the same recurrence step by step with the
same weights (gates, cell, projection) in ops both exporters map, verified against the model.
The model keeps its exporter: the swap is made when the script's model is built (LoadCode), so
the same fix answers the TorchScript refusal, the dynamo checker failure and the run-time error.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

# OD303/OD304: the dynamo exporter's LSTM node with a projected cell state fails the checker.
CODES = ("OD299", "OD303", "OD304", "OD501", "OD601", "OD603")

UNROLLED = '''import torch


class UnrolledProjectedLSTM(torch.nn.Module):
    """nn.LSTM with proj_size, step by step in exportable ops (same weights, same math)."""

    def __init__(self, lstm: torch.nn.LSTM) -> None:
        super().__init__()
        self.lstm = lstm  # keeps the weights (and their names) where they were

    def forward(self, input, hx=None):
        lstm = self.lstm
        x = input.transpose(0, 1) if lstm.batch_first else input  # (time, batch, features)
        directions = 2 if lstm.bidirectional else 1
        batch = x.shape[1]
        if hx is None:
            h0 = x.new_zeros(lstm.num_layers * directions, batch, lstm.proj_size)
            c0 = x.new_zeros(lstm.num_layers * directions, batch, lstm.hidden_size)
        else:
            h0, c0 = hx
        last_h, last_c = [], []
        for layer in range(lstm.num_layers):
            outputs = []
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                w_ih = getattr(lstm, "weight_ih" + suffix)
                w_hh = getattr(lstm, "weight_hh" + suffix)
                w_hr = getattr(lstm, "weight_hr" + suffix)
                b = (getattr(lstm, "bias_ih" + suffix) + getattr(lstm, "bias_hh" + suffix)) if lstm.bias else None
                h, c = h0[layer * directions + direction], c0[layer * directions + direction]
                steps = range(x.shape[0] - 1, -1, -1) if direction else range(x.shape[0])
                seq = [None] * x.shape[0]
                for t in steps:
                    gates = x[t] @ w_ih.T + h @ w_hh.T
                    if b is not None:
                        gates = gates + b
                    i, f, g, o = gates.chunk(4, dim=-1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = (torch.sigmoid(o) * torch.tanh(c)) @ w_hr.T
                    seq[t] = h
                outputs.append(torch.stack(seq))
                last_h.append(h)
                last_c.append(c)
            x = torch.cat(outputs, dim=-1) if directions == 2 else outputs[0]
        out = x.transpose(0, 1) if lstm.batch_first else x
        return out, (torch.stack(last_h), torch.stack(last_c))


for name, module in list(model.named_modules()):
    if isinstance(module, torch.nn.LSTM) and module.proj_size > 0:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, UnrolledProjectedLSTM(module))
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Replace each LSTM with proj_size by the unrolled recurrence."""
    load = next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})
    lstms = load.get("projected_lstms") or []
    if ctx.target_kind != "script" or not lstms:
        return []
    if finding.op and "lstm" not in finding.op.lower():
        return []
    shown = ", ".join(str(n) for n in lstms[:3]) + (" ..." if len(lstms) > 3 else "")
    return [Fix(
        kind="projected_lstm",
        title=f"Rewrite the LSTM with proj_size ({shown}) as its recurrence in exportable ops",
        snippet=UNROLLED + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost="the time loop is unrolled: the ONNX model holds one block of ops per time step and keeps "
             "the example's sequence length; export again for another length",
        recipe=Recipe("projected_lstm", (LoadCode(UNROLLED),), isolated=True),
    )]
