"""Velocity of attention fields on every engine: time and peak memory, as ratios.

    python benchmarks/fields.py            # the full grid (tens of minutes on 2 cores)
    python benchmarks/fields.py --quick    # n ≤ 10⁴, d = 16
    python benchmarks/fields.py --variants softmax sigmoid --sizes 1000 10000 100000 \
        --dims 16 --budget 600           # sigmoid's engines against softmax on SDPA

For each variant, n and d, every engine that expresses the variant is timed on the same
float32 particle cloud; rows report seconds, extra peak memory, the relative error against
the dense engine (or against SDPA where dense does not fit), and ratios against dense and
against SDPA measured in the same run; ×chunked compares with the chunked engine of the same
variant, ×softmax with softmax on the same engine and ×softmax-sdpa with softmax on SDPA
(the fused kernel every variant is measured against). Engines whose time, extrapolated
quadratically from the previous n, would exceed the per-call budget are skipped ("skip").
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from _common import print_table, timed

from tpde._engines import pick_engine, pick_kernel_sum_engine, pick_logsumexp_engine
from tpde._engines.keops import keops_status
from tpde.attention import (
    L2,
    GroupedQueryAttention,
    InnerSolves,
    Linear,
    Masked,
    MultiHead,
    RoPE,
    Sigmoid,
    Sinkhorn,
    Softmax,
)
from tpde.measures import Empirical

BUDGET_S = 60.0  # default largest predicted time of one velocity call (--budget)
DENSE_BYTES = 6 * 2**30  # the dense engine materialises n² scores: skip beyond 6 GiB


def _qkv(d: int, generator: torch.Generator):
    Q, K = (torch.randn(d, d, generator=generator) / math.sqrt(d) for _ in range(2))
    V = torch.eye(d) + 0.1 * torch.randn(d, d, generator=generator)
    return Q, K, V


def softmax_field(d: int, generator: torch.Generator):
    return Softmax(*_qkv(d, generator))


def l2_field(d: int, generator: torch.Generator):
    return L2(*_qkv(d, generator))


def multihead_field(d: int, generator: torch.Generator, heads: int = 2):
    """The paper's layout: Q, K, V (d × d) cut into H = 2 heads of size d/2 (d = 2: 1)."""
    return MultiHead.split(*_qkv(d, generator), heads=heads)


def linear_field(d: int, generator: torch.Generator):
    Q, K, V = _qkv(d, generator)
    return Linear(Q, K, V / d)  # keep |Γ| of order |x| at d = 16


def sigmoid_field(d: int, generator: torch.Generator):
    return Sigmoid(*_qkv(d, generator))


def sinkhorn_field(d: int, generator: torch.Generator):
    """Default eps = 1, tol = 1e-6 (a handful of iterations here; see the iters column)."""
    return Sinkhorn(*_qkv(d, generator))


def masked_field(d: int, generator: torch.Generator):
    """Causal softmax; the cloud's positions are i/(n − 1), all distinct."""
    return Masked(Softmax(*_qkv(d, generator)))


# name -> (factory(d, generator) -> field, engines that express it)
VARIANTS = {
    "softmax": (softmax_field, ("dense", "chunked", "sdpa", "keops", "auto")),
    "l2": (l2_field, ("dense", "chunked", "sdpa", "keops", "auto")),
    "multihead": (multihead_field, ("dense", "chunked", "sdpa", "keops", "auto")),
    "linear": (linear_field, ("dense", "chunked", "tiled", "keops", "auto")),
    "sigmoid": (sigmoid_field, ("dense", "chunked", "tiled", "keops", "auto")),
    "sinkhorn": (sinkhorn_field, ("dense", "chunked", "sdpa", "keops", "auto")),
    "masked": (masked_field, ("dense", "chunked", "sdpa", "keops", "auto")),
}

# What "auto" resolves to, per variant (default: the softmax rule pick_engine).
AUTO_RULE = {
    "linear": lambda n, m, device, dtype: "factorised",
    "sigmoid": pick_kernel_sum_engine,
    "sinkhorn": pick_logsumexp_engine,  # the iterations; the final average follows pick_engine
}


def run(variants, sizes, dims, budget=BUDGET_S, only=None):
    rows = []
    keops_ok, reason = keops_status()
    if not keops_ok:
        print(f"KeOps skipped: {reason}")
    for name in variants:
        factory, engines = VARIANTS[name]
        for d in dims:
            generator = torch.Generator().manual_seed(0)
            field = factory(d, generator)
            last = {}
            for n in sizes:
                # Positions (used by masked attention only): i/(n − 1).
                cloud = Empirical(
                    torch.randn(n, d, generator=generator), positions=torch.linspace(0, 1, n)
                )
                results, iterations = {}, {}
                for engine in engines:
                    if (engine == "keops" and not keops_ok) or (only and engine not in only):
                        continue
                    predicted = last.get(engine, (0, 0))[0] * (n / last.get(engine, (0, 1))[1]) ** 2
                    too_big = engine == "dense" and 4 * n * n > DENSE_BYTES
                    if predicted > budget or too_big:
                        skipped = {"variant": name, "d": d, "n": n, "engine": engine, "s": "skip"}
                        rows.append(skipped)
                        continue
                    info = InnerSolves()  # Sinkhorn's scalings report here
                    with torch.no_grad():
                        seconds, memory, out = timed(
                            lambda e=engine, f=field, c=cloud, i=info: f.velocity(
                                c, engine=e, info=i
                            ),
                            repeat=3,
                        )
                    last[engine] = (seconds, n)
                    results[engine] = (seconds, memory, out)
                    iterations[engine] = info.last
                if not results:  # every engine skipped at this n
                    continue
                order = ("dense", "sdpa", "chunked", *results)
                reference = next(results[e] for e in order if e in results)
                auto = AUTO_RULE.get(name, pick_engine)(n, n, cloud.device, cloud.dtype)
                for engine, (seconds, memory, out) in results.items():
                    error = float((out - reference[2]).abs().max() / reference[2].abs().max())
                    row = {
                        "variant": name,
                        "d": d,
                        "n": n,
                        "engine": engine if engine != "auto" else f"auto→{auto}",
                        "s": seconds,
                        "MB": memory / 2**20,
                        "rel.err": error,
                    }
                    if "dense" in results:
                        row["×dense"] = seconds / results["dense"][0]
                    if "sdpa" in results:
                        row["×sdpa"] = seconds / results["sdpa"][0]
                    if "chunked" in results:
                        row["×chunked"] = seconds / results["chunked"][0]
                    # Only "auto" left (e.g. linear's factorised route at large n): no ×best.
                    best = min((s for e, (s, _, _) in results.items() if e != "auto"), default=0)
                    if best:
                        row["×best"] = seconds / best
                    info = iterations[engine]
                    if info is not None:  # Sinkhorn: cost per iteration (row + column step)
                        row["iters"] = info.iterations
                        row["s/iter"] = seconds / info.iterations
                    rows.append(row)
    return rows


def add_softmax_ratio(rows) -> None:
    """Columns ×softmax and ×softmax-sdpa: time over softmax's time on the same engine, and
    on SDPA, at the same d and n (same run)."""
    softmax = {
        (r["d"], r["n"], r["engine"]): r["s"]
        for r in rows
        if r["variant"] == "softmax" and isinstance(r["s"], float)
    }
    for row in rows:
        if row["variant"] == "softmax" or not isinstance(row["s"], float):
            continue
        for column, engine in (("×softmax", row["engine"]), ("×softmax-sdpa", "sdpa")):
            reference = softmax.get((row["d"], row["n"], engine))
            if reference:
                row[column] = row["s"] / reference


# ---------------------------------------------------------------------- a decoder's attention
# SmolLM2-135M's attention block: d = 576, H = 9 query heads, H_kv = 3 key/value heads,
# d_h = 64, RoPE base 10⁵, causal, float32 (https://huggingface.co/HuggingFaceTB/SmolLM2-135M).
DECODER = {"d": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "base": 1e5}


def plain_decoder_attention(x, Wq, Wk, Wv, Wo, cos, sin, heads, kv_heads):
    """The baseline: Llama's attention in plain torch (rotate-half RoPE from cached cos/sin
    tables, key/value heads repeated, one causal SDPA call on 4-D inputs, as Hugging Face
    writes it; a 3-D call misses the CPU flash kernel and is 2.5× slower at n = 1024)."""
    n, dh = x.shape[0], Wq.shape[0] // heads

    def split(t, h):
        return t.view(n, h, dh).transpose(0, 1)

    def rope(t):
        return t * cos + torch.cat([-t[..., dh // 2 :], t[..., : dh // 2]], dim=-1) * sin

    q, k, v = split(x @ Wq.T, heads), split(x @ Wk.T, kv_heads), split(x @ Wv.T, kv_heads)
    q, k = rope(q), rope(k)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=0) for t in (k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], v[None], is_causal=True
    )
    return out[0].transpose(0, 1).reshape(n, heads * dh) @ Wo.T


def _interleaved(fns, repeat: int) -> list[float]:
    """Median seconds of each function, timed in turns (A, B, A, B, …) after two warm-ups each,
    so that a busy machine slows both alike."""
    for fn in fns:
        fn(), fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, bucket in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


def run_decoder(sizes=(128, 1024), engines=("auto", "sdpa", "chunked")) -> list[dict]:
    """GQA + RoPE at SmolLM2's size against :func:`plain_decoder_attention` (×plain)."""
    c = DECODER
    H, G, dh, d = c["heads"], c["kv_heads"], c["head_dim"], c["d"]
    generator = torch.Generator().manual_seed(0)
    Wq, Wk, Wv, Wo = (
        torch.randn(rows, cols, generator=generator) / math.sqrt(cols)
        for rows, cols in ((H * dh, d), (G * dh, d), (G * dh, d), (d, H * dh))
    )
    field = GroupedQueryAttention(
        Wq, Wk, Wv, Wo, heads=H, kv_heads=G, position=RoPE(base=c["base"]), causal=True
    )
    rows = []
    for n in sizes:
        x = torch.randn(n, d, generator=generator)
        tokens = Empirical(x, positions=torch.arange(n))
        angles = torch.arange(n, dtype=torch.float64)[:, None] * field.position.frequencies(dh)
        cos, sin = (f(torch.cat([angles, angles], dim=-1)).float() for f in (torch.cos, torch.sin))

        def plain(x=x, cos=cos, sin=sin):
            return plain_decoder_attention(x, Wq, Wk, Wv, Wo, cos, sin, H, G)

        with torch.no_grad():
            reference = plain()
            calls = [lambda e=e, t=tokens: field.velocity(t, engine=e) for e in engines]
            seconds = _interleaved([plain, *calls], repeat=40 if n <= 256 else 10)
            for engine, call, s in zip(engines, calls, seconds[1:], strict=True):
                error = float((call() - reference).abs().max() / reference.abs().max())
                auto = pick_engine(n, n, x.device, x.dtype, H)
                name = engine if engine != "auto" else f"auto→{auto}"
                rows.append(
                    {
                        "n": n,
                        "engine": name,
                        "s": s,
                        "plain s": seconds[0],
                        "×plain": s / seconds[0],
                        "rel.err": error,
                    }
                )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--sizes", nargs="*", type=int, help="n values (default: by --quick)")
    parser.add_argument("--dims", nargs="*", type=int, help="d values (default: by --quick)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds per call")
    parser.add_argument("--engines", nargs="*", help="only these engines (default: all)")
    parser.add_argument(
        "--decoder", action="store_true", help="only the decoder attention (GQA + RoPE) table"
    )
    args = parser.parse_args()
    if args.decoder:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32")
        print_table(run_decoder(), ["n", "engine", "s", "plain s", "×plain", "rel.err"])
        return
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 50_000, 100_000])
    dims = args.dims or ([16] if args.quick else [2, 16, 64])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32")
    rows = run(args.variants, sizes, dims, args.budget, args.engines)
    add_softmax_ratio(rows)
    columns = ["variant", "d", "n", "engine", "s", "MB", "rel.err", "×dense", "×sdpa"]
    columns += ["×chunked", "×best", "×softmax", "×softmax-sdpa"]
    if any("iters" in row for row in rows):
        columns += ["iters", "s/iter"]
    print_table(rows, columns)
    print("\nDecoder attention, SmolLM2-135M's size (GQA + RoPE, causal) against plain torch:")
    print_table(run_decoder(), ["n", "engine", "s", "plain s", "×plain", "rel.err"])


if __name__ == "__main__":
    main()
