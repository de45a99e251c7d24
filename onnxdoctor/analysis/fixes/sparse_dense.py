"""Sparse tensors written dense: ONNX has no sparse tensors, and neither exporter maps the sparse
constructors (`aten::sparse_coo_tensor`, `aten::_sparse_coo_tensor_with_dims_and_tensors`,
pytorch#112487) or a sparse constant. The export runs with the sparse tensors built dense
(recipe.EagerExport.dense_sparse): the values summed into a zero tensor at their indices, which
is what coalescing does with duplicates, and the sparse products the ordinary ones.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, LoadCode, Recipe

CODES = ("OD202", "OD203", "OD299")

SPARSE = re.compile(r"sparse|Sparse", re.IGNORECASE)

SNIPPET = """\
# ONNX has no sparse tensors: build the matrix dense. The same sums (duplicates add up, as
# coalescing does); memory grows with the matrix's full size.
# before:  adj = torch.sparse_coo_tensor(edge_index, values, (rows, cols))
adj = torch.zeros(rows, cols, dtype=values.dtype).index_put(
    (edge_index[0], edge_index[1]), values, accumulate=True)
# and torch.sparse.mm(adj, x) / torch.spmm(adj, x) -> adj @ x
"""

# A conversion to a sparse layout (`x.to_sparse_csr()`): the model's result, not its arithmetic.
_CONVERSION = re.compile(r"to_sparse(?:_(?:coo|csr|csc|bsr|bsc))?\b")

CONVERSION_SNIPPET = """\
# ONNX has no sparse tensors: the model returns the dense matrix, and the caller converts it.
# before:  return [xi.to_sparse_csr() for xi in x]
return list(x)
# after ONNX Runtime: torch.from_numpy(out).to_sparse_csr() (or scipy.sparse.csr_matrix(out))
"""


# A sparse matrix the model holds and reads the parts of (HandMesh#31's up-sampling reads
# `trans._indices()`, `trans._values()` and `trans.size(0)`): the tracer records those reads on a
# sparse constant it cannot write; dense copies made once are constants it can.
HELD_SNIPPET = """\
# The model holds sparse tensors ({named}) and reads their parts in forward(): keep dense
# copies made once, when the model is built, and read those instead:
# before:  row, col = trans._indices(); value = trans._values(); n = trans.size(0)
#   __init__: self.register_buffer("up_index0", trans._indices().clone())
#             self.register_buffer("up_value0", trans._values().clone()); self.up_rows0 = trans.size(0)
#   forward:  row, col = self.up_index0; value = self.up_value0; n = self.up_rows0
"""


def _named(held: list[str]) -> str:
    return ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")


# Sparse example inputs given dense: the ONNX model's inputs are the dense tensors.
DENSE_INPUTS = """\
# ONNX has no sparse tensors: the model takes the dense tensor (x.to_dense() before the call).
example_inputs = tuple(x.to_dense() if isinstance(x, torch.Tensor) and x.layout is not torch.strided else x
                       for x in example_inputs)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The export with sparse tensors dense, for a failure on a sparse op, a sparse constant or a
    sparse example input."""
    if ctx.target_kind != "script":
        return []
    text = " ".join([finding.op or "", finding.message, ctx.export_error])
    load = ctx.facts_of(Stage.LOAD)
    # The model may hold a sparse constant, or take a sparse input, the exporter's error does not
    # call sparse (`aten::to_dense` has no export).
    if not SPARSE.search(text) and not load.get("sparse_tensors") and not load.get("sparse_inputs"):
        return []
    if load.get("sparse_inputs"):
        return [Fix(
            kind="dense_sparse",
            title="Give the model its sparse inputs dense (ONNX has no sparse tensors): the exported model "
                  "takes the dense tensors, and the model's sparse operations run dense",
            snippet=("import torch\n" + DENSE_INPUTS
                     + "# and in forward(): torch.sparse.mm(adj, x) / torch.spmm(adj, x) -> adj @ x; x.to_dense()\n"
                     "# of a dense tensor gives it back\n"
                     "torch.onnx.export(model, example_inputs, 'model.onnx')\n"),
            applicability=Applicability.SAFE,
            cost="callers pass the dense tensor (x.to_dense()); memory and time grow with its full size",
            recipe=Recipe("dense_sparse", (LoadCode(DENSE_INPUTS), EagerExport(dense_sparse=True)), isolated=True),
        )]
    converts = bool(_CONVERSION.search(text))
    # A held sparse tensor whose parts forward() reads: the export stopped at that read.
    parts = finding.op in ("aten::_indices", "aten::_values", "aten::indices", "aten::values", "aten::size")
    held = [str(name) for name in load.get("sparse_tensors") or ()] if parts else []
    title = ("Return the dense tensor and convert it to the sparse layout after ONNX Runtime runs (ONNX has "
             "no sparse tensors)" if converts else
             "Build the sparse tensor dense (ONNX has no sparse tensors): index_put with accumulate, "
             "and the dense product")
    if held and not converts:
        title += f", with the indices, values and sizes of the sparse tensors the model holds ({_named(held)}) as constants"
    return [Fix(
        kind="dense_sparse",
        title=title,
        snippet=CONVERSION_SNIPPET if converts else SNIPPET + (HELD_SNIPPET.format(named=_named(held)) if held else ""),
        applicability=Applicability.SAFE,
        cost="the matrix is dense in the ONNX model: memory and time grow with its full size",
        recipe=Recipe("dense_sparse", (EagerExport(dense_sparse=True),), isolated=True),
    )]
