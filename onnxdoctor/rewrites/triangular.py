"""Triangular solves by substitution, unrolled over the matrix size."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

SOLVE_TRIANGULAR = r'''
def _substitute(A, B, upper, unitriangular):
    """Solve A X = B for triangular A, one row of X at a time (forward or back substitution)."""
    n = A.shape[-1]
    rows = [None] * n
    order = range(n - 1, -1, -1) if upper else range(n)
    done = []
    for i in order:
        b = B[..., i : i + 1, :]
        for j in done:
            b = b - A[..., i : i + 1, j : j + 1] * rows[j]
        rows[i] = b if unitriangular else b / A[..., i : i + 1, i : i + 1]
        done.append(i)
    return torch.cat(rows, -2)


def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """torch.linalg.solve_triangular (X A = B is solved as A^T X^T = B^T)."""
    if left:
        return _substitute(A, B, upper, unitriangular)
    return _substitute(A.transpose(-2, -1), B.transpose(-2, -1), not upper, unitriangular).transpose(-2, -1)


def triangular_solve(B, A, upper=True, transpose=False, unitriangular=False):
    """The deprecated torch.triangular_solve(b, A): (solution, a copy of A)."""
    if transpose:
        X = _substitute(A.transpose(-2, -1), B, not upper, unitriangular)
    else:
        X = _substitute(A, B, upper, unitriangular)
    return X, A.clone()
'''

CHOLESKY_SOLVE = SOLVE_TRIANGULAR + r'''

def cholesky_solve(B, L, upper=False):
    """torch.cholesky_solve(B, L): A X = B where A = L L^T (or U^T U), as two substitutions."""
    if upper:
        return _substitute(L, _substitute(L.transpose(-2, -1), B, False, False), True, False)
    return _substitute(L.transpose(-2, -1), _substitute(L, B, False, False), True, False)


def cholesky_inverse(L, upper=False):
    """torch.cholesky_inverse(L): A^-1 from A's Cholesky factor, solved against the identity."""
    return cholesky_solve(torch.eye(L.shape[-1], dtype=L.dtype, device=L.device).expand_as(L), L, upper)
'''

REWRITES = (
    Rewrite(
        op="aten::linalg_solve_triangular",
        family="linalg",
        targets=("aten.linalg_solve_triangular.default", "aten.triangular_solve.default"),
        functions=("linalg_solve_triangular", "triangular_solve"),
        function="linalg_solve_triangular",
        source=SOLVE_TRIANGULAR,
        exactness=Exactness.ROUNDING,
        error="the same substitution as LAPACK's trsm, summed in another order (rounding only)",
        limits="the graph grows as n^2 / 2 for an n x n matrix (fine up to a few dozen); only the "
        "triangle named is read, as in torch; a zero on the diagonal gives inf/NaN as torch does",
        reported_as=("aten::triangular_solve",),
    ),
    Rewrite(
        op="aten::cholesky_solve",
        family="linalg",
        targets=("aten.cholesky_solve.default", "aten.cholesky_inverse.default"),
        functions=("cholesky_solve", "cholesky_inverse"),
        function="cholesky_solve",
        source=CHOLESKY_SOLVE,
        exactness=Exactness.ROUNDING,
        error="the two triangular substitutions LAPACK's potrs makes, summed in another order (rounding only)",
        limits="the graph grows as n^2 for an n x n factor (fine up to a few dozen); only the triangle "
        "named is read, as in torch",
        reported_as=("aten::cholesky_inverse", "aten::_cholesky_solve_helper"),
    ),
)
