"""Linear algebra: inverse and solve (Gauss-Jordan), Cholesky, slogdet, Vandermonde, SVD (Jacobi),
the grouped (ragged, mixture-of-experts) matrix product, and diagonal matrices from vectors."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

GAUSS_JORDAN = r'''
def _gauss_jordan(A, B):
    """Solve A X = B by Gauss-Jordan elimination with partial pivoting, unrolled over n."""
    n = A.shape[-1]
    rows = torch.arange(n, device=A.device)
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    m = torch.cat([A.expand(*batch, n, n), B.expand(*batch, n, B.shape[-1])], -1)  # [..., n, n + k]
    for col in range(n):
        # The row at or below `col` with the largest |value| in this column becomes the pivot row.
        candidates = torch.where(rows >= col, m[..., :, col].abs(), torch.full_like(m[..., :, col], -1.0))
        is_pivot = (rows == candidates.argmax(-1, keepdim=True)).unsqueeze(-1)  # [..., n, 1]
        is_col = (rows == col).unsqueeze(-1)  # [n, 1]
        pivot_row = (m * is_pivot).sum(-2, keepdim=True)  # [..., 1, n + k]
        col_row = m[..., col : col + 1, :]
        m = torch.where(is_col, pivot_row, torch.where(is_pivot, col_row, m))  # swap (exact)
        normalized = m[..., col : col + 1, :] / m[..., col : col + 1, col : col + 1]
        m = torch.where(is_col, normalized, m - m[..., :, col : col + 1] * normalized)
    return m[..., :, n:]
'''

INV = GAUSS_JORDAN + r'''

def linalg_inv_ex(A, *, check_errors=False):
    """torch.linalg.inv_ex: Gauss-Jordan against the identity."""
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return _gauss_jordan(A, eye), info


def linalg_inv(A):
    """torch.linalg.inv and torch.inverse."""
    return linalg_inv_ex(A)[0]
'''

SOLVE = GAUSS_JORDAN + r'''

def _complex_parts(x):
    return torch.view_as_real(x).unbind(-1) if x.is_complex() else (x, torch.zeros_like(x))


def _solve(A, B):
    """A X = B; complex A or B as the real system [[Ar, -Ai], [Ai, Ar]] [Xr; Xi] = [Br; Bi]
    (a beamformer's MVDR weights), whose Gauss-Jordan works on real values only."""
    if not (A.is_complex() or B.is_complex()):
        return _gauss_jordan(A, B)
    (ar, ai), (br, bi) = _complex_parts(A), _complex_parts(B)
    n = A.shape[-1]
    block = torch.cat([torch.cat([ar, -ai], -1), torch.cat([ai, ar], -1)], -2)
    both = _gauss_jordan(block, torch.cat([br, bi], -2))
    return torch.view_as_complex(torch.stack([both[..., :n, :], both[..., n:, :]], -1))


def linalg_solve(A, B, *, left=True):
    """torch.linalg.solve: Gauss-Jordan on [A | B] (X A = B is solved as A^T X^T = B^T)."""
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    if vector:
        B = B.unsqueeze(-1)
    if left:
        X = _solve(A, B)
    else:
        X = _solve(A.transpose(-2, -1), B.transpose(-2, -1)).transpose(-2, -1)
    return X.squeeze(-1) if vector else X
'''

CHOLESKY = r'''
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """torch.linalg.cholesky, column by column (Cholesky-Banachiewicz), unrolled over n."""
    n = A.shape[-1]
    rows = torch.arange(n, device=A.device)
    columns = []
    for j in range(n):
        v = A[..., :, j]
        if columns:
            done = torch.stack(columns, -1)  # [..., n, j]
            v = v - (done * done[..., j : j + 1, :]).sum(-1)
        d = torch.sqrt(v[..., j : j + 1])
        zero = torch.zeros_like(v)
        columns.append(torch.where(rows > j, v / d, torch.where(rows == j, d.expand_as(v), zero)))
    L = torch.stack(columns, -1)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return (L.transpose(-2, -1) if upper else L), info


def linalg_cholesky(A, *, upper=False):
    """torch.linalg.cholesky."""
    return linalg_cholesky_ex(A, upper=upper)[0]


def cholesky(A, upper=False):
    """The deprecated torch.cholesky (upper is positional there)."""
    return linalg_cholesky_ex(A, upper=upper)[0]
'''

SLOGDET = r'''
def linalg_slogdet(A):
    """torch.linalg.slogdet and torch.slogdet from the determinant (ONNX Det)."""
    det = torch.linalg.det(A)
    return torch.sign(det), torch.log(det.abs())


def logdet(A):
    """torch.logdet: log(det(A)), NaN for a negative determinant."""
    return torch.log(torch.linalg.det(A))


def _linalg_slogdet(A):
    """The internal overload: torch also returns the LU factorization and pivots (zeros here)."""
    sign, logabsdet = linalg_slogdet(A)
    n = A.shape[-1]
    lu = torch.zeros_like(A)
    pivots = torch.zeros(A.shape[:-2] + (n,), dtype=torch.int32, device=A.device)
    return sign, logabsdet, lu, pivots
'''

VANDER = r'''
def linalg_vander(x, *, N=None):
    """torch.linalg.vander: powers x**0 .. x**(N-1) as repeated products along the last dim."""
    n = x.shape[-1] if N is None else N
    if not x.is_floating_point() and not x.is_complex():
        x = x.to(torch.int64)
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril(-1)  # keep[k, j]: j < k
    base = x.unsqueeze(-1).unsqueeze(-1).expand(*x.shape, n, n)
    terms = torch.where(keep, base, torch.ones((), dtype=x.dtype, device=x.device))
    return terms.prod(-1)
'''

ROUND_ROBIN = r'''
def _round_robin(A):
    """Rounds of disjoint pairs (p, q), p < q, in which every pair of A's n columns meets once (the
    circle method: n - 1 rounds for n even, n for n odd, where one index sits out each round), each
    round as two 0/1 matrices [pairs, n] of A's dtype whose rows pick p and q. A matrix product
    with a row of the identity picks a column exactly, and keeps index tensors out of a
    decomposition (constants made inside one are not lifted by run_decompositions)."""
    n = A.shape[-1]
    players = list(range(n)) + ([n] if n % 2 else [])
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(min(a, b), max(a, b)) for a, b in zip(players[:half], reversed(players[half:]))]
        pairs = [(p, q) for p, q in pairs if q < n]
        if pairs:  # n = 1: nothing to pair
            rounds.append((torch.stack([eye[p] for p, _ in pairs]), torch.stack([eye[q] for _, q in pairs])))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds
'''

SVD = ROUND_ROBIN + r'''

def _jacobi_sweeps(n):
    """Sweeps enough at this size: measured on random and on covariance float32 matrices in the
    round-robin order, 4 reach rounding for n <= 4, 6 for n <= 16, 8 for n <= 32 and 9 for n <= 64
    (Jacobi converges quadratically once close); two more for margin (not measured beyond 64)."""
    return 6 if n <= 4 else 8 if n <= 16 else 10 if n <= 32 else 11


def _jacobi_svd(A):
    """Thin SVD of A [..., m, n] by one-sided (Hestenes) Jacobi rotations: each round rotates n/2
    disjoint column pairs at once, a fixed number of sweeps unrolled (the graph grows as sweeps x n
    rounds, not sweeps x n^2 / 2 rotations); returns U [..., m, k], S [..., k], V [..., n, k],
    k = min(m, n), S descending."""
    m, n = A.shape[-2], A.shape[-1]
    if m < n:  # orthogonalize the shorter side: A^T = V S U^T
        V, S, U = _jacobi_svd(A.transpose(-2, -1))
        return U, S, V
    # A's columns and V's (the identity, then every rotation) stacked: one product per round picks
    # and rotates both.
    V = torch.eye(n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], n, n)
    Z = torch.cat([A, V], -2)
    rounds = [(EP, EQ, EP.transpose(0, 1), EQ.transpose(0, 1)) for EP, EQ in _round_robin(A)]
    tiny = torch.finfo(A.dtype).tiny
    for _ in range(_jacobi_sweeps(n)):
        for EP, EQ, EPt, EQt in rounds:
            ZP, ZQ = Z @ EPt, Z @ EQt  # columns p and q: [..., m + n, pairs]
            WP, WQ = ZP[..., :m, :], ZQ[..., :m, :]
            alpha = (WP * WP).sum(-2, keepdim=True)
            beta = (WQ * WQ).sum(-2, keepdim=True)
            gamma = (WP * WQ).sum(-2, keepdim=True)
            # tan of the angle that makes columns p and q orthogonal, the smaller root, written
            # without dividing by gamma: 0 for columns already orthogonal (tiny keeps 0/0 out).
            # d and gamma are sums of squares: scaled to at most 1 before they are squared again,
            # or entries beyond about 1e9 (below 1e-10) would overflow (underflow) in float32.
            d = beta - alpha
            sign = (d >= 0).to(A.dtype) * 2 - 1
            scale = torch.maximum(d.abs(), 2 * gamma.abs()) + tiny
            d, g = d / scale, 2 * gamma / scale
            t = g * sign / (d.abs() + torch.sqrt(d * d + g * g) + tiny)
            c = 1 / torch.sqrt(1 + t * t)
            s = c * t
            # p <- c p - s q, q <- s p + c q, written back through the same 0/1 matrices.
            Z = Z + ((c - 1) * ZP - s * ZQ) @ EP + (s * ZP + (c - 1) * ZQ) @ EQ
    W, V = Z[..., :m, :], Z[..., m:, :]
    S = torch.sqrt((W * W).sum(-2))
    order = torch.argsort(S, dim=-1, descending=True)
    S = torch.gather(S, -1, order)
    W = torch.gather(W, -1, order.unsqueeze(-2).expand(W.shape))
    V = torch.gather(V, -1, order.unsqueeze(-2).expand(V.shape))
    U = W / torch.where(S > 0, S, torch.ones_like(S)).unsqueeze(-2)
    return U, S, V


def svd(A, some=True, compute_uv=True):
    """torch.svd: U, S, V (V itself, not its transpose)."""
    m, n = A.shape[-2], A.shape[-1]
    if compute_uv and not some and m != n:
        raise NotImplementedError("some=False for a non-square matrix: use some=True")
    U, S, V = _jacobi_svd(A)
    if not compute_uv:  # torch's zero-filled U and V are square whatever `some` says
        batch = A.shape[:-2]
        return (torch.zeros(*batch, m, m, dtype=A.dtype, device=A.device), S,
                torch.zeros(*batch, n, n, dtype=A.dtype, device=A.device))
    return U, S, V


def _linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    """torch.linalg.svd / svdvals (their common internal op): U, S, Vh."""
    if full_matrices and A.shape[-2] != A.shape[-1]:
        raise NotImplementedError("full_matrices=True for a non-square matrix: use full_matrices=False")
    U, S, V = _jacobi_svd(A)
    return U, S, V.transpose(-2, -1)


def linalg_svd(A, full_matrices=True, *, driver=None):
    """torch.linalg.svd as Python calls it (full_matrices defaults to True there)."""
    return _linalg_svd(A, full_matrices, True, driver)


def linalg_svdvals(A, driver=None):
    """torch.linalg.svdvals: S alone."""
    return _jacobi_svd(A)[1]
'''

LSTSQ = SVD + r'''

def linalg_lstsq(A, B, rcond=None, *, driver=None):
    """torch.linalg.lstsq: the minimum-norm least-squares solution through the pseudo-inverse of
    the Jacobi SVD, singular values at or below rcond times the largest dropped (what LAPACK's
    gelsy, gelsd and gelss return, for full-rank and rank-deficient A alike); the other outputs as
    the driver gives them on the CPU."""
    vector = B.dim() == A.dim() - 1  # B one dim short of A: torch takes it as one column
    if vector:
        B = B.unsqueeze(-1)
    m, n = A.shape[-2], A.shape[-1]
    U, S, V = _jacobi_svd(A)
    if rcond is None or rcond < 0:  # LAPACK takes a negative rcond as machine precision
        rcond = torch.finfo(A.dtype).eps * max(m, n)
    keep = S > rcond * S[..., :1]
    inverse = torch.where(keep, 1 / torch.where(keep, S, torch.ones_like(S)), torch.zeros_like(S))
    X = V @ (inverse.unsqueeze(-1) * (U.transpose(-2, -1) @ B))
    driver = driver or "gelsy"
    empty = torch.zeros(0, dtype=A.dtype, device=A.device)
    residuals = empty
    if driver != "gelsy" and m > n:
        residuals = ((A @ X - B) ** 2).sum(-2)
    rank = keep.sum(-1) if driver != "gels" else torch.zeros(0, dtype=torch.int64, device=A.device)
    singular_values = S if driver in ("gelsd", "gelss") else empty
    return X.squeeze(-1) if vector else X, residuals, rank, singular_values
'''

GROUPED_MM = r'''
def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm: each group's slice times its own matrix (offs: where each group ends),
    computed as the product against every group and a selection of each row's (column's, inner
    slice's) own, in float32 as torch's kernel accumulates, then rounded to the output type."""
    if bias is not None:
        return NotImplemented  # torch itself refuses a bias ("Bias not supported yet")
    dtype = out_dtype if out_dtype is not None else mat_a.dtype
    a, b = mat_a.float(), mat_b.float()
    if a.dim() == 3 and b.dim() == 3:  # a batch of equal groups: no offsets
        return (a @ b).to(dtype)
    if a.dim() == 2 and b.dim() == 3:  # rows of a in groups, one matrix of b each
        group = (torch.arange(a.shape[0], device=a.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
        every = torch.einsum("mk,gkn->mgn", a, b)
        chosen = group.clamp(max=b.shape[0] - 1).view(-1, 1, 1).expand(-1, 1, b.shape[-1])
        return every.gather(1, chosen).squeeze(1).to(dtype)
    if a.dim() == 3 and b.dim() == 2:  # columns of b in groups, one matrix of a each
        group = (torch.arange(b.shape[-1], device=b.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
        every = torch.einsum("gmk,kn->gmn", a, b)
        chosen = group.clamp(max=a.shape[0] - 1).view(1, 1, -1).expand(1, a.shape[1], -1)
        return every.gather(0, chosen).squeeze(0).to(dtype)
    # 2-D by 2-D: the inner dimension in groups, one product per group.
    group = (torch.arange(a.shape[-1], device=a.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
    mask = (group.unsqueeze(0) == torch.arange(offs.shape[0], device=a.device).unsqueeze(-1)).float()
    return torch.einsum("mk,gk,kn->gmn", a, mask, b).to(dtype)
'''

EINSUM = r'''
def einsum(equation, tensors, path=None):
    """torch.einsum whose operands' ellipses cover different numbers of dims (torch broadcasts them
    from the right; ONNX's Einsum shape inference wants the same count): the shorter ones get
    size-1 dims where their ellipsis starts, which is what the broadcast does. Any other call is
    left as it is."""
    terms = equation.replace(" ", "").split("->")[0].split(",")
    if "..." not in equation or len(terms) != len(tensors):
        return NotImplemented
    covered = [t.dim() - len(term.replace("...", "")) if "..." in term else None for term, t in zip(terms, tensors)]
    counts = {c for c in covered if c is not None}
    if len(counts) < 2:
        return NotImplemented
    most = max(counts)
    even = []
    for term, t, c in zip(terms, tensors, covered):
        if c is not None and c < most:
            at = term.index("...")
            t = t.reshape(tuple(t.shape[:at]) + (1,) * (most - c) + tuple(t.shape[at:]))
        even.append(t)
    return torch.einsum(equation, *even)
'''

DIAG_EMBED = r'''
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """torch.diag_embed: the last dim's values on a diagonal of two new dims, zeros elsewhere."""
    n = input.shape[-1]
    size = n + abs(offset)
    rows = torch.arange(size, device=input.device)
    on_diagonal = (rows[None, :] - rows[:, None]) == offset
    zero = torch.zeros((), dtype=input.dtype, device=input.device)
    if n == 0:  # no values: a matrix of zeros, |offset| square
        out = zero.expand(*input.shape[:-1], size, size).clone()
    else:
        # Row r of the diagonal holds value r - max(-offset, 0); rows past the values are masked off.
        values = input.index_select(-1, (rows - max(-offset, 0)).clamp(0, n - 1))
        out = torch.where(on_diagonal, values.unsqueeze(-1), zero)
    # The two new dims move from the end to dim1, dim2 (a permutation with non-negative entries:
    # the TorchScript exporter writes movedim's negative dims into Transpose as they are).
    rank = out.dim()
    first, second = dim1 % rank, dim2 % rank
    others = iter(range(rank - 2))
    order = [rank - 2 if d == first else rank - 1 if d == second else next(others) for d in range(rank)]
    return out.permute(order)
'''


REWRITES = (
    Rewrite(
        op="aten::_grouped_mm",
        family="linalg",
        targets=("aten._grouped_mm.default",),
        function="_grouped_mm",
        source=GROUPED_MM,
        exactness=Exactness.ROUNDING,
        error="float32 accumulation in another order, rounded to the output type: in bfloat16, an "
        "element may land one unit in the last place away",
        limits="computes every group's product for every row (group count times the work of one "
        "matmul, and as much memory for the intermediate); no bias (torch refuses one too); "
        "rows past the last offset get the last group's product (torch leaves them undefined)",
        reported_as=("aten::grouped_mm",),
    ),
    Rewrite(
        op="aten::linalg_inv",
        family="linalg",
        targets=("aten.linalg_inv.default", "aten.inverse.default", "aten.linalg_inv_ex.default"),
        functions=("linalg_inv", "linalg_inv", "linalg_inv_ex"),
        function="linalg_inv",
        source=INV,
        exactness=Exactness.ROUNDING,
        error="Gauss-Jordan with partial pivoting: relative error about cond(A) x machine epsilon",
        limits="static matrix size n (the graph grows as n steps; fine up to n = 64); a singular "
        "matrix gives inf/NaN instead of an error; `info` is always 0",
        reported_as=("aten::linalg_inv_ex", "aten::inverse"),
    ),
    Rewrite(
        op="aten::linalg_solve",
        family="linalg",
        targets=("aten.linalg_solve.default",),
        function="linalg_solve",
        source=SOLVE,
        exactness=Exactness.ROUNDING,
        error="Gauss-Jordan with partial pivoting: relative error about cond(A) x machine epsilon",
        limits="static matrix size n (the graph grows as n steps; fine up to n = 64); a singular "
        "matrix gives inf/NaN instead of an error; a complex system is solved as a real one of size 2n "
        "(so n up to 32)",
        reported_as=("aten::_linalg_solve_ex", "aten::linalg_solve_ex"),
    ),
    Rewrite(
        op="aten::linalg_cholesky",
        family="linalg",
        targets=("aten.linalg_cholesky.default", "aten.cholesky.default", "aten.linalg_cholesky_ex.default"),
        functions=("linalg_cholesky", "cholesky", "linalg_cholesky_ex"),
        function="linalg_cholesky",
        source=CHOLESKY,
        exactness=Exactness.ROUNDING,
        error="the same algorithm, another summation order: a few ulps times n",
        limits="static matrix size n (the graph grows as n steps); a matrix that is not positive "
        "definite gives NaN instead of an error; `info` is always 0",
        reported_as=("aten::linalg_cholesky_ex", "aten::cholesky"),
    ),
    Rewrite(
        op="aten::linalg_slogdet",
        family="linalg",
        targets=("aten.linalg_slogdet.default", "aten.slogdet.default", "aten.logdet.default",
                 "aten._linalg_slogdet.default"),
        functions=("linalg_slogdet", "linalg_slogdet", "logdet", "_linalg_slogdet"),
        function="linalg_slogdet",
        source=SLOGDET,
        exactness=Exactness.ROUNDING,
        error="log|det| from ONNX Det: relative error about n x machine epsilon",
        limits="the determinant must fit the dtype (float32 overflows beyond about 1e38: use "
        "float64 for large matrices); the internal _linalg_slogdet's LU and pivots outputs are not "
        "computed (zeros)",
        reported_as=("aten::_linalg_slogdet", "aten::slogdet", "aten::logdet"),
    ),
    Rewrite(
        op="aten::einsum",
        family="linalg",
        targets=("aten.einsum.default",),
        function="einsum",
        source=EINSUM,
        exactness=Exactness.EXACT,
        error="none: the same einsum, its operands reshaped with size-1 dims",
        limits="only an equation whose operands' ellipses cover different numbers of dims "
        "(torch broadcasts those; ONNX's shape inference refuses them, or the TorchScript exporter "
        "crashes building the node); other einsums are left as they are",
        when=r"[Ee]llipsis|SIGSEGV|died",
    ),
    Rewrite(
        op="aten::linalg_vander",
        family="linalg",
        targets=("aten.linalg_vander.default",),
        function="linalg_vander",
        source=VANDER,
        exactness=Exactness.ROUNDING,
        error="powers as products in another order: a few ulps",
        limits="memory grows as len(x) x N^2",
        reported_as=("prims::prod",),
    ),
    Rewrite(
        op="aten::linalg_lstsq",
        family="linalg",
        targets=("aten.linalg_lstsq.default",),
        function="linalg_lstsq",
        source=LSTSQ,
        exactness=Exactness.APPROXIMATION,
        error="the pseudo-inverse of the Jacobi SVD (see aten::svd): about cond(A) x 1e-6 relative "
        "in float32 (measured, not a proven bound); the minimum-norm solution, as LAPACK's drivers give",
        limits="static matrix shape; the graph grows as the SVD's (fine up to min(m, n) = 64); the "
        "rank is counted from the SVD's singular values (gelsy estimates it from a pivoted QR: "
        "they can differ for a nearly singular A); residuals are computed where torch's driver "
        "computes them (not the CPU default, gelsy), also for a rank-deficient A (torch leaves them "
        "empty there); real dtypes only",
        # torch.export's fake kernel refuses the op (its outputs' shapes depend on the driver and
        # the rank: DynamicOutputShapeException): no exported program holds it to decompose.
        calls=(("torch.linalg.lstsq", "linalg_lstsq"),),
        captured=False,
    ),
    Rewrite(
        op="aten::svd",
        family="linalg",
        targets=("aten.svd.default", "aten._linalg_svd.default", "aten.linalg_svdvals.default"),
        functions=("svd", "_linalg_svd", "linalg_svdvals"),
        function="svd",
        source=SVD,
        exactness=Exactness.APPROXIMATION,
        error="one-sided Jacobi with a fixed number of sweeps (6 for min(m, n) <= 4, 8 up to 16, 10 "
        "up to 32, 11 beyond): on random and covariance float32 matrices up to 64 x 64, singular values within "
        "6e-6 of LAPACK's relative to the largest and U orthonormal to 1e-6 (a column of U for a "
        "singular value far below the largest is good to about 1e-7 times their ratio) (measured, not a proven bound: a matrix "
        "that needs more sweeps is left less converged); singular vectors are unique only up to sign (and, for repeated "
        "singular values, up to a rotation within their subspace), as between LAPACK drivers: code "
        "using U and V together (U diag(S) V^T, V U^T) gets the same result, code using one alone "
        "may not",
        limits="static matrix shape; the graph grows as sweeps x min(m, n) rounds of min(m, n) / 2 "
        "rotations each (fine up to min(m, n) = 64, measured); full_matrices=True (torch.svd's some=False) only for square matrices; U's columns for zero singular "
        "values are zero (LAPACK completes them to an orthonormal basis)",
        calls=(("torch.linalg.svd", "linalg_svd"), ("torch.svd", "svd"), ("torch.Tensor.svd", "svd"),
               ("torch.linalg.svdvals", "linalg_svdvals")),
        reported_as=("aten::_linalg_svd", "aten::linalg_svd"),
    ),
    Rewrite(
        op="aten::diag_embed",
        family="linalg",
        targets=("aten.diag_embed.default",),
        function="diag_embed",
        source=DIAG_EMBED,
        exactness=Exactness.EXACT,
        error="none: each entry is the input's value or zero, selected (no arithmetic)",
        limits="none known (any offset and dims; the dynamo exporter maps the op itself: the entry is "
        "for the TorchScript exporter, which has no symbolic for it)",
        # The TorchScript exporter's gap, met after another call rewrite (U diag(S) U^T after an SVD).
        calls=(("torch.diag_embed", "diag_embed"), ("torch.Tensor.diag_embed", "diag_embed")),
    ),
)
