"""Sparse matrix products: torch.sparse.mm / addmm, which no exporter maps (ONNX has no sparse
tensors). Written densely; a sparse model input is given to the exported model as a dense one
(the rewrite fix densifies the example, analysis/fixes/rewrite.py)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

SPARSE_MM = r'''
def sparse_mm(mat1, mat2):
    """torch.sparse.mm(mat1, mat2) on dense operands: the ordinary product."""
    return torch.mm(mat1, mat2)


def sparse_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """torch.sparse.addmm on dense operands: beta * self + alpha * mat1 @ mat2 (self not read at
    all when beta is 0, as torch does: its inf and NaN do not spread)."""
    product = alpha * torch.mm(mat1, mat2)
    return product if beta == 0 else beta * self + product
'''

REWRITES = (
    Rewrite(
        op="aten::_sparse_mm",
        family="sparse",
        targets=("aten._sparse_mm.default", "aten._sparse_addmm.default"),
        functions=("sparse_mm", "sparse_addmm"),
        function="sparse_mm",
        source=SPARSE_MM,
        exactness=Exactness.ROUNDING,
        error="a dense product: the same sums in another order",
        limits="the sparse matrix is dense in the ONNX model (memory grows with its full size); a "
        "sparse model input becomes a dense input: feed it with .to_dense()",
        reported_as=("aten::_sparse_addmm", "aten::sparse_mm"),
    ),
)
