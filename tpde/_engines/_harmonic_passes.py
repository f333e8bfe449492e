r"""The two passes of the harmonics engine over blocks of tokens (:mod:`tpde._engines.harmonics`).

Layout: tokens last. A block holds b tokens of B clouds, x of shape (B, 3, b) and weights
w of shape (B, 1, b); every table is (…, rows, b), so that the elementwise work runs along
contiguous tokens and the sums over tokens and degrees are matrix products.

Tables (:func:`tables`): cos kψ and sin kψ for k < K of the two angles ψ = φ (azimuth) and
ψ = θ (polar, sin θ ≥ 0), by doubling, e^{i(n − 1 + j)ψ} = e^{i(n − 1)ψ}e^{ijψ} for
0 < j < n, from
e^{iφ} = (x₁ + ix₂)/sin θ and e^{iθ} = x₃ + i sin θ (no trigonometric function; error ≈ k
ulp). Shape (2 [cos, sin], 2 [φ, θ], K, b).

Pass 1 (:func:`moments`): the channel-0 moments at degree L + 1,

    E[s, m, k] = Σ_j w_j A_{s,m}(φ_j) cos kθ_j   (m even),
    O[s, m, k] = Σ_j w_j A_{s,m}(φ_j) sin kθ_j   (m odd, k ≥ 1),

A_{0,m} = cos mφ, A_{1,m} = sin mφ, as matrix products over chunks of :data:`CHUNK` tokens,
the chunks summed pairwise (their rounding does not grow with the number of tokens).
The moments of the channels w ⊙ x follow exactly from these (:func:`channel_moments`):
x₃ = cos θ, x₁ + ix₂ = sin θ e^{iφ}, and products of cosines and sines are sums of two.

Pass 2 (:func:`synthesis`): S^{(c)}(x) = Σ_{s,m,k} A_{s,m}(φ) G^{(c)}_{s,m,k} T_k(θ), one
matrix product (8·rows × (L + 1)) @ ((L + 1) × b) per group, then a sum over (s, m) of
the product with the azimuth table.

Work (:func:`flops` counts it, 2 per multiply-add): per token 2(L + 2)² multiply-adds in
pass 1 (the old path's four channels took 8(L + 1)²), 8(L + 1)² + 8(L + 1) in pass 2; per
cloud 8(L + 1)³ or so to apply the kernels; O(L) per token in the tables, not counted. In
all ≈ 20(L + 1)² flops per token (≈ 32(L + 1)² before the channels' moments were derived).
Without autograd the tables and products are written into :class:`Buffers` kept per thread
for one evaluation: fresh multi-megabyte arrays cost a page fault per 4 KiB, which made the
tables 7× slower than their arithmetic. The views each pass takes of its buffers are made
once per block shape (:meth:`Buffers.plan`), and what stays the same from block to block
(a table's row 0, the zero padding of a short part) is written once per plan, so a block
costs its arithmetic and few dispatches. The first rows of a token's two tables (e^{iφ},
e^{iθ}: a square root and two divisions, :func:`first_rows`) are computed once, in pass 1,
into one (B, 2, 2, n) array that pass 2 reads, and pass 2 writes its sums into the
evaluation's output (no concatenation). Pass 1 builds the tables of a block
:data:`TABLE_TOKENS` tokens at a time and multiplies their chunks before building the next
(the same chunks summed in the same order: the moments do not change), pass 2 takes blocks
of 2048 tokens (:data:`~tpde._engines.harmonics.SYNTHESIS_TOKENS`). One block, one thread,
minimum of 60 (busy 2-core machine, 7 Dec 2026), the engine before the plans over the
engine with them at L = 18 and 38: ×1.04–1.07 at 4096 tokens, ×1.06–1.21 at 2048,
×1.16–1.52 at 512–1024 (where the dispatches weighed most); 2048 tokens per block took the
least time per token. Torch calls per block at L = 18 (issue 35, with the first rows
shared and pass 1's products by :func:`torch.bmm`, :func:`_single`): pass 2 (2048 tokens)
41, were 58; pass 1 (4096 tokens) 93, were 134; the whole evaluation took 0.81–0.95× the
CPU time of the engine before (9327f93) at 10⁵ and 10⁶ tokens, the same sums bit for bit
(``benchmarks/sphere_harmonics.py`` docstring).

The floor (issue 35). Thread CPU time of the stages, one thread, 16384 tokens in the
engine's blocks, minimum of 8 (2-core machine at load 6, 7 Dec 2026), at L = 18 (L = 38):
pass 2's products 31–34 % (45–47 %) at 35–36 (39–44) GFLOP/s, pass 1's products 20–21 %
(16–18 %) at 15–17 (28–29) GFLOP/s, the tables of both passes 20–22 % (15–17 %), the
azimuth contraction 14 % (12–13 %), the first rows 4 % (2 %), the weights, the chunks'
pairwise sums and the plans 7–9 % (5 %); the float64 matmul of pass 2's shape ran at 38
(43) GFLOP/s in the same process, and the stages together at 0.39 (0.58) of it. The
products alone bound that ratio by 0.74 (0.92): pass 1's are 20 × 64 × 20 per chunk at
L = 18 (MKL gives ≤ 20 GFLOP/s even to one 20 × 2048 × 20 product) and carry 21 % of the
flops. Half the matmul rate at L = 18 leaves the rest 2·198 − 266 = 130 ns per token; it
takes ~245. The tables (4(L + 2) + 4(L + 1) entries per token, four streaming operations
per doubling step, ≈ 0.6 ns per entry) and the contraction (8(L + 1) products per token
written by the matrix product, multiplied in place and read again) are memory-bound torch
operations whose arithmetic is a few per cent of the flops: halving them needs each fused
into one pass over cache-resident data, a compiled kernel, which torch's operations do not
give. Measured and not taken (one thread): pass 2's products and contraction in column
sub-blocks of 256–1024 tokens, kept in L2 (1.0–1.16× the time: more dispatches); the tables
as complex numbers (one multiplication per doubling step, but the copy that separates cos
and sin rows for the matrix products costs more than it saves: 1.15–1.5×); blocks of 1024
or 4096 tokens in either pass (0.98–1.17× at 10⁵ tokens); one batched product and one
contraction for both groups (the contraction in one multiplication and a two-step sum: 51
against 73 ns per token at L = 18, but only where both groups have as many rows, L odd; at
even L the odd group would need a padded row and a zero column, 5–8 % more product flops).
A compiled pass 2 (torch.compile's inductor on the same arithmetic, written plainly: the
tables, the two products and the contraction of one 2048-token block, one thread, 8 Dec
2026, idle): 421 against this module's 470 µs at L = 18 (28.9 against 25.9 GFLOP/s; the
product of its shape alone 43 GFLOP/s), 1808 against 2105 µs at L = 38 — 1.11–1.16×, not
the lever; pass 1's small chunked products are (above).
"""

from __future__ import annotations

import math
import threading

import torch

#: Tokens per chunk of the moments' matrix products (their rounding: module notes of
#: :mod:`tpde._engines.harmonics`).
CHUNK = 64

#: Tokens (of all clouds) per table in pass 1: the tables of a block of
#: :data:`~tpde._engines.harmonics.BLOCK_TOKENS` are built this many at a time, so that
#: each stays in the cache while its chunks are multiplied (the sums are unchanged: the same
#: chunks, summed in the same order over the block).
TABLE_TOKENS = 2048


class Buffers:
    """Scratch arrays of one evaluation, one set per thread, reused from block to block.

    Fresh multi-megabyte arrays cost a page fault per 4 KiB (the tables were 7× slower than
    their arithmetic); the set is dropped with the evaluation, so nothing stays allocated
    after it. :meth:`plan` keeps, with an array, the views that a pass takes of it: each
    slice is a dispatch, and the dispatches run under the GIL when two threads share the
    blocks (top-level torch operations of one evaluation of 10⁵ tokens: 6488 before,
    5434 with twice as many blocks in pass 2). Under autograd no buffer is used (every
    table is a new tensor)."""

    def __init__(self):
        self._local = threading.local()

    def get(self, name: str, shape: tuple, like: torch.Tensor) -> torch.Tensor:
        """A tensor of this thread of the given shape, dtype and device of ``like``."""
        store = self._local.__dict__.setdefault("arrays", {})
        count = math.prod(shape)
        held = store.get(name)
        if held is None or held.numel() < count:
            held = torch.empty(count, dtype=like.dtype, device=like.device)
            store[name] = held
        return held[:count].view(shape)

    def plan(self, name: str, shape: tuple, like: torch.Tensor, build, tag=None, init=None):
        """``build(array)`` for this thread's array ``name`` of this shape, built once per
        ``tag`` (what else the views depend on) and kept while the array is the same memory
        (the views stay valid from block to block). ``init(views)``, if given, writes what
        stays the same from block to block (a table's row 0, the padding): when the plan is
        built and whenever the array was last used through another plan (whose views may
        have overwritten it)."""
        local = self._local.__dict__
        plans, last = local.setdefault("plans", {}), local.setdefault("last", {})
        key = (name, tuple(shape), tag)
        held, array = plans.get(key), local.get("arrays", {}).get(name)
        # the array is only sliced (two dispatches) when the plan is (re)built
        fresh = held is None or array is None or held[0] != array.data_ptr()
        if fresh:
            array = self.get(name, shape, like)
            held = plans[key] = (array.data_ptr(), build(array))
        if init is not None and (fresh or last.get(name) != (key, held[0])):
            init(held[1])
        last[name] = (key, held[0])
        return held[1]


def _rotate(C, S, c, s, outC, outS):
    """(C + iS)·(c + is) elementwise, into outC, outS when given (else new tensors)."""
    if outC is None:
        return C * c - S * s, S * c + C * s
    torch.mul(C, c, out=outC).addcmul_(S, s, value=-1)
    torch.mul(S, c, out=outS).addcmul_(C, s)
    return outC, outS


def _steps(K: int) -> list[tuple[int, int]]:
    """The doubling steps (n, top): rows n … top − 1 are rows 1 … top − n times row n − 1."""
    steps, n = [], 2
    while n < K:
        top = min(2 * n - 1, K)
        steps.append((n, top))
        n = top
    return steps


def _table_views(out: torch.Tensor, tokens: int) -> tuple:
    """The views of a (B, 2, 2, K, b′) table buffer that :func:`tables` writes, over its first
    ``tokens`` columns: row 0 (cos, sin), row 1 as one (B, 2, 2, tokens) view (None when
    K = 1) and the doubling steps (the columns past them stay)."""
    C, S = out[:, 0, ..., :tokens], out[:, 1, ..., :tokens]
    K = out.shape[-2]
    steps = []
    for n, top in _steps(K):
        rows, factor, new = slice(1, top - n + 1), slice(n - 1, n), slice(n, top)
        steps.append((C[..., rows, :], S[..., rows, :], C[..., factor, :], S[..., factor, :],
                      C[..., new, :], S[..., new, :]))  # fmt: skip
    first = out[..., 1, :tokens] if K > 1 else None
    return C[..., 0, :], S[..., 0, :], first, steps


def _first_row(views) -> None:
    """Row 0 of a table (cos 0 = 1, sin 0 = 0), through its views (:func:`_table_views`):
    written once per plan (:meth:`Buffers.plan`), the later blocks leave it as it is."""
    views[0].fill_(1)
    views[1].zero_()


def _first_rows(x: torch.Tensor):
    """(cos φ, sin φ, cos θ, sin θ) of tokens x (B, 3, b): φ from (x₁ + ix₂)/sin θ, φ = 0 at a
    pole (x₁ = x₂ = 0), θ from x₃ + i sin θ."""
    x1, x2, z = x.unbind(1)
    s = torch.sqrt(x1 * x1 + x2 * x2)
    pole = s == 0
    safe = torch.where(pole, 1.0, s)
    return torch.where(pole, 1.0, x1 / safe), x2 / safe, z, s


def first_rows(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """:func:`_first_rows` written into ``out`` of shape (B, 2, 2, b): [cos, sin] × [φ, θ], the
    layout of a table's row 1 (:func:`tables`), the same numbers bit for bit. Pass 1
    writes them for every token, pass 2 reads them (:mod:`tpde._engines.harmonics`). On the
    CPU the poles' ``where`` runs only in a block that has one (off the CPU always: reading
    the minimum would wait for the device)."""
    x1, x2, z = x.unbind(1)
    cphi, ctheta, sphi, stheta = out[:, 0, 0], out[:, 0, 1], out[:, 1, 0], out[:, 1, 1]
    torch.mul(x1, x1, out=stheta)
    stheta.add_(torch.mul(x2, x2, out=sphi)).sqrt_()
    if x.device.type != "cpu" or (stheta.numel() and float(stheta.amin()) == 0):  # a pole?
        for row, value in zip((cphi, sphi), _first_rows(x)[:2], strict=True):
            row.copy_(value)
    else:
        torch.div(x1, stheta, out=cphi)
        torch.div(x2, stheta, out=sphi)
    ctheta.copy_(z)
    return out


def tables(x: torch.Tensor, K: int, store: Buffers | None):
    """cos kψ, sin kψ for k < K and ψ = (φ, θ) at tokens x (B, 3, b): shape (B, 2, 2, K, b).

    Rows n … 2n − 2 are rows 1 … n − 1 times row n − 1 (e^{ikψ}e^{i(n−1)ψ}), so the rows
    double at each step with no other multiplier; row k carries ≈ log₂ k roundings of the
    first. At a pole (x₁ = x₂ = 0) the azimuth is taken as 0 (every term of order m ≥ 1
    carries sin^m θ = 0 there, so the sums do not depend on it)."""
    if store is None:  # autograd: built by concatenation
        cphi, sphi, ctheta, stheta = _first_rows(x)
        c, s = torch.stack([cphi, ctheta], dim=1), torch.stack([sphi, stheta], dim=1)  # (B, 2, b)
        C, S = torch.stack([torch.ones_like(c), c], -2), torch.stack([torch.zeros_like(s), s], -2)
        while C.shape[-2] < K:
            n = C.shape[-2]
            nC, nS = _rotate(C[..., 1:n, :], S[..., 1:n, :], C[..., n - 1 : n, :],
                             S[..., n - 1 : n, :], None, None)  # fmt: skip
            C, S = torch.cat([C, nC], -2), torch.cat([S, nS], -2)
        return torch.stack([C[..., :K, :], S[..., :K, :]], dim=1)
    b = x.shape[-1]
    shape = (x.shape[0], 2, 2, K, b)
    out = store.get("tables", shape, x)
    views = store.plan("tables", shape, x, lambda a: _table_views(a, b), b, _first_row)
    _fill(first_rows(x, store.get("first", (x.shape[0], 2, 2, b), x)), views)
    return out


def _fill(first: torch.Tensor, views) -> None:
    """Write a table through its views (:func:`_table_views`) from its row 1, ``first``
    (B, 2, 2, b) (:func:`first_rows`); row 0 is written once per plan (:func:`_first_row`)."""
    _, _, row, steps = views
    if row is not None:  # none when K = 1
        row.copy_(first)
    for step in steps:
        _rotate(*step)


def pairwise_sum(t: torch.Tensor) -> torch.Tensor:
    """Σ over the first dimension by halves (a tree): rounding grows like log₂ of its length,
    not like the length (a running sum of 2000 × (1/2000) is 1 − 5.5e-14)."""
    while t.shape[0] > 1:
        half = t.shape[0] // 2
        paired = t[:half] + t[half : 2 * half]
        t = torch.cat([paired, t[2 * half :]]) if t.shape[0] % 2 else paired
    return t[0]


def _chunked(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Σ_j left[..., r, j] right[..., k, j] → (B, r, k), tokens j in chunks of :data:`CHUNK`
    (left: (B, r, b) contiguous, right: (B, k, b) any strides), summed pairwise."""
    b = left.shape[-1]
    chunk = min(CHUNK, b)
    pad = -b % chunk
    if pad:
        left = torch.nn.functional.pad(left, (0, pad))
        right = torch.nn.functional.pad(right, (0, pad))
    count = left.shape[-1] // chunk
    left = left.unflatten(-1, (count, chunk)).transpose(1, 2)  # (B, count, r, chunk)
    right = right.unflatten(-1, (count, chunk)).permute(0, 2, 3, 1)  # (B, count, chunk, k)
    return pairwise_sum((left @ right).movedim(1, 0))


def _orders(K: int) -> tuple[int, int]:
    """Rows of the even and of the odd orders m < K."""
    return (K + 1) // 2, K // 2


def _split(array: torch.Tensor, *shapes) -> list[torch.Tensor]:
    """Consecutive views of the given shapes from the start of a flat array."""
    views, start = [], 0
    for shape in shapes:
        count = math.prod(shape)
        views.append(array[start : start + count].view(shape))
        start += count
    return views


def _tree(t: torch.Tensor) -> list[tuple]:
    """In-place steps of :func:`pairwise_sum` over dimension 1 of t: ("add", a, b) for a += b,
    ("copy", a, b) for a = b; the sum ends in t[:, 0] (same additions, same order)."""
    steps, n = [], t.shape[1]
    while n > 1:
        half = n // 2
        steps.append(("add", t[:, :half], t[:, half : 2 * half]))
        if n % 2:
            steps.append(("copy", t[:, half], t[:, 2 * half]))
        n = half + n % 2
    return steps


def _table_plan(array: torch.Tensor, B: int, K: int, b: int, chunk: int) -> dict:
    """Views of pass 1's table buffer for b tokens (:func:`moments`): the tables over
    ⌈b/chunk⌉·chunk columns, per group the weighted azimuth rows and the two operands of the
    chunks' products, and the columns past b (the padding, zeroed by :func:`_pass1_init`)."""
    count = -(-b // chunk)
    width = count * chunk
    even, odd = _orders(K)
    t, *weighted = _split(array, (B, 2, 2, K, width), (B, 2 * even, width), (B, 2 * odd, width))
    plan = {"tables": _table_views(t, b), "padding": [t[..., b:]] + [w[..., b:] for w in weighted]}
    plan["groups"] = [
        (t[:, :, 0, group::2, :b],  # the azimuth rows (B, 2, rows, b)
         weighted[group].unflatten(1, (2, -1))[..., :b],  # the same times w
         _single(weighted[group].unflatten(-1, (count, chunk)).transpose(1, 2)),  # (B, count, r, ·)
         _single(polar.unflatten(-1, (count, chunk)).permute(0, 2, 3, 1)))  # (B, count, chunk, k)
        for group, polar in ((0, t[:, 0, 1]), (1, t[:, 1, 1, 1:]))
    ]  # fmt: skip
    return plan


def _pass1_init(plan: dict) -> None:
    """What pass 1's views leave as it is from part to part: row 0 and the padding."""
    _first_row(plan["tables"])
    for tail in plan["padding"]:
        tail.zero_()


def _single(chunks: torch.Tensor) -> torch.Tensor:
    """(B, count, ·, ·) chunks as (count, ·, ·) when B = 1: :func:`torch.bmm` takes them as
    they are, where :func:`torch.matmul` of the 4-d views pays ≈ 7 µs more per call (the
    same products, bit for bit)."""
    return chunks[0] if chunks.shape[0] == 1 else chunks


def _product_plan(array: torch.Tensor, B: int, count: int, K: int, step: int) -> list:
    """Per group: the (B, count, r, k) products of the chunks of one block (:func:`moments`),
    their slices of ``step`` chunks (:func:`_single`), and the steps of their pairwise sum
    (:func:`_tree`)."""
    even, odd = _orders(K)
    products = _split(array, (B, count, 2 * even, K), (B, count, 2 * odd, K - 1))
    slices = [range(start, min(start + step, count)) for start in range(0, count, step)]
    return [
        ([_single(p[:, c.start : c.stop]) for c in slices], _tree(p), p[:, 0]) for p in products
    ]


def moments(x: torch.Tensor, w: torch.Tensor, L: int, store: Buffers | None, first=None):
    """Pass 1 on one block: the channel-0 moments at degree L + 1 (module notes).

    x: (B, 3, b), w: (B, 1, b). Returns E of shape (B, 2, ⌊(L + 1)/2⌋ + 1, L + 2) (even
    orders, cos kθ for k ≤ L + 1) and O of shape (B, 2, ⌈(L + 1)/2⌉, L + 1) (odd orders,
    sin kθ for 1 ≤ k ≤ L + 1). With a store: the same products of the same chunks summed
    in the same order, in preallocated views (:func:`_table_plan`, :func:`_product_plan`),
    the tables built :data:`TABLE_TOKENS` tokens at a time (padded with zeros to whole
    chunks), their row 1 written once for the block into ``first`` (B, 2, 2, b)
    (:func:`first_rows`; a scratch array when None), which pass 2 reads again."""
    K = L + 2
    if store is None:
        t = tables(x, K, None)
        parts = []
        for group, polar in ((0, t[:, 0, 1]), (1, t[:, 1, 1, 1:])):
            weighted = t[:, :, 0, group::2] * w.unsqueeze(1)  # (B, 2, rows, b)
            parts.append(_chunked(weighted.flatten(1, 2), polar).unflatten(1, (2, -1)))
        return parts[0], parts[1]
    B, b = x.shape[0], x.shape[-1]
    chunk = min(CHUNK, b)
    count, even, odd = -(-b // chunk), *_orders(K)
    step = max(1, TABLE_TOKENS // (B * chunk))  # chunks per table
    size = B * count * (2 * even * K + 2 * odd * (K - 1))
    groups = store.plan(
        "products", (size,), x, lambda a: _product_plan(a, B, count, K, step), (B, count, K, step)
    )
    if first is None:
        first = store.get("first", (B, 2, 2, b), x)
    first_rows(x, first)
    for part, start in enumerate(range(0, b, step * chunk)):
        stop = min(start + step * chunk, b)
        size = B * -(-(stop - start) // chunk) * chunk * (4 * K + 2 * (even + odd))
        build = lambda a, n=stop - start: _table_plan(a, B, K, n, chunk)  # noqa: E731
        plan = store.plan("pass1", (size,), x, build, (B, K, stop - start, chunk), _pass1_init)
        _fill(first[..., start:stop], plan["tables"])
        weight = w[..., start:stop].unsqueeze(1)
        for (azimuth, weighted, left, right), (products, _, _) in zip(
            plan["groups"], groups, strict=True
        ):
            torch.mul(azimuth, weight, out=weighted)
            (torch.bmm if B == 1 else torch.matmul)(left, right, out=products[part])
    parts = []
    for _, tree, total in groups:
        for kind, target, source in tree:
            target.add_(source) if kind == "add" else target.copy_(source)
        parts.append(total.unflatten(1, (2, -1)).clone())
    return parts[0], parts[1]


def channel_moments(E: torch.Tensor, O: torch.Tensor, L: int):
    """The moments of the four channels (w, w x₁, w x₂, w x₃) at degree L from the channel-0
    moments at degree L + 1 (:func:`moments`); exact identities (module notes).

    Returns (B, 4, 2, ⌊L/2⌋ + 1, L + 1) (even orders, k ≤ L) and (B, 4, 2, ⌈L/2⌉, L)
    (odd orders, 1 ≤ k ≤ L)."""
    B = E.shape[0]
    K = L + 2
    # F[s, m, k], m = 0 … L + 1, k = 0 … L + 1 (odd orders: sin 0θ = 0 in column 0).
    F = E.new_zeros(B, 2, K, K)
    F[:, :, 0::2] = E
    F[:, :, 1::2, 1:] = O
    parity = torch.ones(K, dtype=E.dtype, device=E.device)
    parity[1::2] = -1  # +1 where the order's polar type is cos, −1 where it is sin
    up = F[..., 1 : L + 2]  # F[m, k + 1], k = 0 … L
    down = torch.cat([parity[:, None] * F[..., 1:2], F[..., :L]], -1)  # F[m, k − 1]
    ch3 = (up + down)[:, :, : L + 1] / 2
    U = -parity[:, None] * (up - down) / 2  # sin θ · (type of m ± 1), signed; m = 0 … L + 1
    reflect = torch.tensor([1.0, -1.0], dtype=E.dtype, device=E.device)[:, None, None]
    Up = U[:, :, 1 : L + 2]  # U[m + 1], m = 0 … L
    Um = torch.cat([reflect * U[:, :, 1:2], U[:, :, :L]], 2)  # U[m − 1]; cos(−φ), sin(−φ)
    ch1 = (Up + Um) / 2
    ch2 = torch.stack([Up[:, 1] - Um[:, 1], Um[:, 0] - Up[:, 0]], 1) / 2
    ch0 = F[:, :, : L + 1, : L + 1]
    M = torch.stack([ch0, ch1, ch2, ch3], 1)  # (B, 4, 2, L + 1, L + 1)
    return M[:, :, :, 0::2], M[:, :, :, 1::2, 1:]


def _synthesis_plan(array: torch.Tensor, B: int, K: int, b: int) -> dict:
    """Views of pass 2's buffer for blocks of b tokens (:func:`synthesis`): the tables and,
    per group, the polar rows, the azimuth rows and the product G·T as (B, 4, 2, rows, b)."""
    even, odd = _orders(K)
    t, *products = _split(array, (B, 2, 2, K, b), (B, 8 * even, b), (B, 8 * odd, b))
    groups = []
    for group, polar in ((0, t[:, 0, 1]), (1, t[:, 1, 1, 1:])):
        product = products[group]
        groups.append((polar, product, product.unflatten(1, (4, 2, -1)),
                       t[:, :, 0, group::2].unsqueeze(1)))  # fmt: skip
    return {"tables": _table_views(t, b), "groups": groups}


def synthesis(x: torch.Tensor, Ge, Go, L: int, store: Buffers | None, first=None, out=None):
    """Pass 2 on one block: the four sums S^{(c)} at the tokens x (B, 3, b), shape (B, 4, b).

    Ge: (B, 8·(⌊L/2⌋ + 1), L + 1), rows (c, s, m even), columns cos kθ; Go:
    (B, 8·⌈L/2⌉, L), rows (c, s, m odd), columns sin kθ (k ≥ 1). With a store: the same
    operations in preallocated views (:func:`_synthesis_plan`), the tables' row 1 from
    ``first`` (B, 2, 2, b) when pass 1 wrote it (:func:`moments`), else from x; the sums
    written into ``out`` (B, 4, b) when given (a block of the evaluation's output)."""
    K = L + 1
    if store is None:
        t = tables(x, K, None)
        out = None
        for group, G, polar in ((0, Ge, t[:, 0, 1]), (1, Go, t[:, 1, 1, 1:])):
            azimuth = t[:, :, 0, group::2]  # (B, 2, rows, b)
            part = ((G @ polar).unflatten(1, (4, 2, -1)) * azimuth.unsqueeze(1)).sum((2, 3))
            out = part if out is None else out + part
        return out
    B, b = x.shape[0], x.shape[-1]
    even, odd = _orders(K)
    size = B * b * (4 * K + 8 * (even + odd))
    build = lambda a: _synthesis_plan(a, B, K, b)  # noqa: E731
    plan = store.plan("pass2", (size,), x, build, (B, K, b), lambda p: _first_row(p["tables"]))
    if first is None:
        first = first_rows(x, store.get("first", (B, 2, 2, b), x))
    _fill(first, plan["tables"])
    (polar, product, rows, azimuth), odd_orders = plan["groups"]
    torch.matmul(Ge, polar, out=product)
    out = torch.sum(rows.mul_(azimuth), (2, 3), out=out)
    polar, product, rows, azimuth = odd_orders
    torch.matmul(Go, polar, out=product)
    return out.add_(rows.mul_(azimuth).sum((2, 3)))


def flops(n: int, L: int) -> int:
    """Floating-point operations of one evaluation of one cloud of n tokens at degree L.

    2 per multiply-add of the matrix products and of the azimuth contraction:

        pass 1:  n Σ_{m ≤ L+1} 2·(L + 2 − [m odd])                  (:func:`moments`)
        kernels: Σ_{m ≤ L} 4·2·(L + 1 − [m odd])²                    (sphere_sums' einsum)
        pass 2:  n Σ_{m ≤ L} 4·2·(L + 1 − [m odd]) + n·4·2(L + 1)   (:func:`synthesis`)

    (the row sin 0φ = 0 is computed, hence counted). Not counted: the tables (≈ 12(L + 2)
    per token, 3 % at L = 18), the pairwise sums of the chunks (1/:data:`CHUNK` of pass 1),
    the padding of the last chunk, and the kernel matrices (O(L⁴) once per β, cached).
    """
    even, odd = lambda top: top // 2 + 1, lambda top: (top + 1) // 2  # orders m ≤ top
    pass1 = 2 * (even(L + 1) * (L + 2) + odd(L + 1) * (L + 1))
    rows = 4 * 2 * (even(L) * (L + 1) + odd(L) * L)  # (c, s, m) × k entries of G
    kernels = 4 * 2 * (even(L) * (L + 1) ** 2 + odd(L) * L**2)
    pass2 = rows + 4 * 2 * (L + 1)
    return 2 * (n * (pass1 + pass2) + kernels)
