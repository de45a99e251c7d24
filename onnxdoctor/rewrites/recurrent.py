"""Recurrent layers: LSTM (with proj_size) unrolled over its time steps.

The TorchScript exporter refuses an LSTM with `proj_size` ("LSTMs with projections are not
supported"), and the dynamo exporter's LSTM mapping ignores the projection: its ONNX LSTM node gets
a cell state of the projected size, which ONNX Runtime rejects at run time ("Input initial_c must
have shape ...", k2-fsa/icefall#621, sherpa#136). ONNX's LSTM has no projection, so this rewrite
writes the cell out in MatMul/Sigmoid/Tanh, one copy per time step of the example input (what
icefall did by hand). It also serves a plain LSTM whose ONNX LSTM a runtime lacks.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

LSTM = r'''
def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch's LSTM (with or without proj_size), unrolled over the time steps of the example."""
    x = input.transpose(0, 1) if batch_first else input
    h0, c0 = hx
    directions = 2 if bidirectional else 1
    per = len(params) // (num_layers * directions)
    projected = per == (5 if has_biases else 3)
    h_n, c_n = [], []
    steps = x.shape[0]
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            weights = params[index * per:(index + 1) * per]
            w_ih, w_hh = weights[0], weights[1]
            h, c = h0[index], c0[index]
            ys = [h] * steps
            order = range(steps) if direction == 0 else range(steps - 1, -1, -1)
            for t in order:
                gates = x[t] @ w_ih.t() + h @ w_hh.t()
                if has_biases:
                    gates = gates + weights[2] + weights[3]
                i, f, g, o = gates.chunk(4, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                if projected:
                    h = h @ weights[-1].t()
                ys[t] = h
            outputs.append(torch.stack(ys))
            h_n.append(h)
            c_n.append(c)
        x = torch.cat(outputs, -1) if directions == 2 else outputs[0]
    output = x.transpose(0, 1) if batch_first else x
    return output, torch.stack(h_n), torch.stack(c_n)
'''

REWRITES = (
    Rewrite(
        op="aten::lstm",
        family="recurrent",
        targets=("aten.lstm.input",),
        function="lstm",
        source=LSTM,
        exactness=Exactness.ROUNDING,
        error="float rounding (the gates' sums in another order); about 1e-7 in float32",
        limits="the sequence length is fixed by the example input (the loop is unrolled: the graph "
        "holds one cell per time step and layer, so long sequences make large graphs); inference "
        "only (no dropout between layers); packed sequences (aten.lstm.data) are not covered",
    ),
)
