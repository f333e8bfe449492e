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

Feed-forward fields (``--variants swiglu``; per token, no engine) are timed at a real
model's size against the same block written in plain torch, in a table of their own:
SwiGLU at SmolLM2-135M's d = 576, m = 1536 for n = 128 and 2048 tokens (float32),
``field.velocity(cloud)`` against ``(silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ``, one torch
thread, calls alternating: ×torch is the ratio of median times, ×torch best of best times
(the bar of issue 19 is 1.2).

Grouped-query attention (``--variants gqa``) is timed the same way at SmolLM2-135M's size
(d = 576, H = 9, H_kv = 3, d_h = 64, RoPE, causal; n = 128 and 1024, float32) against
the block in plain torch: RoPE from cached tables, key/value heads repeated, one causal
SDPA call (:func:`gqa_torch`).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from _common import print_table, timed, torch_threads

from tpde._engines import pick_engine, pick_kernel_sum_engine, pick_logsumexp_engine
from tpde._engines.keops import keops_status
from tpde.fields import (
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
    SwiGLU,
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
FIELD_FACTORIES = {
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


def swiglu_weights(d: int, m: int, generator: torch.Generator):
    """W_gate, W_up (m, d) and W_down (d, m), entries of variance 1/fan-in (|F(x)| ~ |x|)."""
    gate, up = (torch.randn(m, d, generator=generator) / math.sqrt(d) for _ in range(2))
    return gate, up, torch.randn(d, m, generator=generator) / math.sqrt(m)


def swiglu_torch(x, W_gate, W_up, W_down):
    """The block as a model writes it: three products, silu, one elementwise product."""
    return (torch.nn.functional.silu(x @ W_gate.T) * (x @ W_up.T)) @ W_down.T


# name -> (weights(d, m, generator), tpde field class, plain torch block, (d, m) of the model)
FEEDFORWARD = {"swiglu": (swiglu_weights, SwiGLU, swiglu_torch, (576, 1536))}  # SmolLM2-135M
FEEDFORWARD_SIZES = (128, 2048)  # tokens: a short prompt and SmolLM2's context length


def alternating(routes: dict, rounds: int, budget_s: float = 20.0) -> dict:
    """Time each route of ``routes`` (name -> fn) once per round, in turn, after one warm-up
    call each: {name: (median s, best s, last result)}.

    Calls alternate, and the order reverses every round, so that load from other processes
    on a shared machine falls on every route alike (timing one route's repeats, then the
    other's, showed swings of 1.5× at n = 128 on 2 busy cores). Stops early after
    ``budget_s`` seconds of rounds.
    """
    results = {name: fn() for name, fn in routes.items()}
    times = {name: [] for name in routes}
    start = time.perf_counter()
    for round_ in range(rounds):
        order = list(routes.items())
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            begin = time.perf_counter()
            results[name] = fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - begin)
        if time.perf_counter() - start > budget_s:
            break
    return {n: (statistics.median(t), min(t), results[n]) for n, t in times.items()}


def run_feedforward(names, sizes=FEEDFORWARD_SIZES, rounds=15, threads=1):
    """Feed-forward fields against their plain torch block, same weights, same run.

    At ``threads`` torch threads (restored after): with 2 threads on 2 cores that other
    processes share, every small elementwise op stalls for ~15 ms (measured: 73k-entry ops
    at 15-18 ms each), so the ratio counted ops, not work; tpde's ``velocity`` adds the
    overflow check of its output (a few elementwise passes, < 1 % of the products at one
    thread).
    """
    with torch_threads(threads):
        return _run_feedforward(names, sizes, rounds)


def _run_feedforward(names, sizes, rounds):
    rows = []
    for name in names:
        weights_of, field_class, plain, (d, m) = FEEDFORWARD[name]
        generator = torch.Generator().manual_seed(0)
        weights = weights_of(d, m, generator)
        field = field_class(*weights)
        for n in sizes:
            cloud = Empirical(torch.randn(n, d, generator=generator))
            routes = {
                "torch": lambda x=cloud.points, w=weights, f=plain: f(x, *w),
                "tpde": lambda c=cloud, f=field: f.velocity(c),
            }
            with torch.no_grad():
                timing = alternating(routes, rounds)
            (plain_s, plain_best, expected), (seconds, best, out) = timing["torch"], timing["tpde"]
            error = float((out - expected).abs().max() / expected.abs().max())
            rows.append(
                {
                    "variant": name,
                    "d": d,
                    "m": m,
                    "n": n,
                    "s": seconds,
                    "torch s": plain_s,
                    "×torch": seconds / plain_s,
                    "×torch best": best / plain_best,
                    "rel.err": error,
                }
            )
    return rows


# SmolLM2-135M's attention block: d = 576, H = 9 query heads, H_kv = 3 key/value heads,
# d_h = 64, RoPE base 10⁵, causal (https://huggingface.co/HuggingFaceTB/SmolLM2-135M).
DECODER = {"d": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "base": 1e5}
DECODER_SIZES = (128, 1024)
DECODER_ENGINES = ("auto", "sdpa", "chunked")


def gqa_torch(x, Wq, Wk, Wv, Wo, cos, sin, heads, kv_heads):
    """Llama's attention as a model writes it in plain torch: rotate-half RoPE from cached
    cos/sin tables, key/value heads repeated, one causal SDPA call on 4-D inputs (a 3-D call
    misses the CPU flash kernel: 2.5× slower at n = 1024)."""
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


def run_decoder(sizes=DECODER_SIZES, engines=DECODER_ENGINES, rounds=15, threads=1):
    """GQA + RoPE (causal) at SmolLM2's size against :func:`gqa_torch`, same weights, same
    run, calls alternating (:func:`alternating`), at ``threads`` torch threads (restored)."""
    with torch_threads(threads):
        return _run_decoder(sizes, engines, rounds)


def _run_decoder(sizes, engines, rounds):
    c = DECODER
    H, G, dh, d = c["heads"], c["kv_heads"], c["head_dim"], c["d"]
    generator = torch.Generator().manual_seed(0)
    Wq, Wk, Wv, Wo = (
        torch.randn(rows, cols, generator=generator) / math.sqrt(cols)
        for rows, cols in ((H * dh, d), (G * dh, d), (G * dh, d), (d, H * dh))
    )
    rope = RoPE(base=c["base"])
    field = GroupedQueryAttention(Wq, Wk, Wv, Wo, heads=H, kv_heads=G, position=rope)
    rows = []
    for n in sizes:
        cloud = Empirical(torch.randn(n, d, generator=generator), positions=torch.arange(n))
        angles = torch.arange(n, dtype=torch.float64)[:, None] * rope.frequencies(dh)
        cos, sin = (f(torch.cat([angles, angles], dim=-1)).float() for f in (torch.cos, torch.sin))
        routes = {
            "torch": lambda x=cloud.points, cs=(cos, sin): gqa_torch(x, Wq, Wk, Wv, Wo, *cs, H, G)
        }
        for engine in engines:
            routes[engine] = lambda e=engine, c=cloud: field.velocity(c, engine=e)
        with torch.no_grad():
            timing = alternating(routes, rounds)
        plain_s, plain_best, expected = timing["torch"]
        auto = pick_engine(n, n, cloud.device, cloud.dtype, H)
        for engine in engines:
            seconds, best, out = timing[engine]
            rows.append(
                {
                    "variant": "gqa+rope",
                    "d": d,
                    "n": n,
                    "engine": engine if engine != "auto" else f"auto→{auto}",
                    "s": seconds,
                    "torch s": plain_s,
                    "×torch": seconds / plain_s,
                    "×torch best": best / plain_best,
                    "rel.err": float((out - expected).abs().max() / expected.abs().max()),
                }
            )
    return rows


def run(variants, sizes, dims, budget=BUDGET_S, only=None):
    rows = []
    keops_ok, reason = keops_status()
    if not keops_ok:
        print(f"KeOps skipped: {reason}")
    for name in (v for v in variants if v in FIELD_FACTORIES):
        factory, engines = FIELD_FACTORIES[name]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    names = [*FIELD_FACTORIES, *FEEDFORWARD, "gqa"]
    parser.add_argument("--variants", nargs="*", default=names, choices=names)
    parser.add_argument("--sizes", nargs="*", type=int, help="n values (default: by --quick)")
    parser.add_argument("--dims", nargs="*", type=int, help="d values (default: by --quick)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds per call")
    parser.add_argument("--engines", nargs="*", help="only these engines (default: all)")
    args = parser.parse_args()
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 50_000, 100_000])
    dims = args.dims or ([16] if args.quick else [2, 16, 64])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32")
    rows = run(args.variants, sizes, dims, args.budget, args.engines)
    add_softmax_ratio(rows)
    columns = ["variant", "d", "n", "engine", "s", "MB", "rel.err", "×dense", "×sdpa"]
    columns += ["×chunked", "×best", "×softmax", "×softmax-sdpa"]
    if any("iters" in row for row in rows):
        columns += ["iters", "s/iter"]
    if rows:
        print_table(rows, columns)
    feedforward = [name for name in args.variants if name in FEEDFORWARD]
    if feedforward:
        print("\nFeed-forward fields against the same block in plain torch (float32, 1 thread)")
        table = run_feedforward(feedforward, rounds=5 if args.quick else 15)
        columns = ["variant", "d", "m", "n", "s", "torch s", "×torch", "×torch best", "rel.err"]
        print_table(table, columns)
    if "gqa" in args.variants:
        print("\nGrouped-query attention + RoPE (causal) against plain torch (float32, 1 thread)")
        table = run_decoder(rounds=10 if args.quick else 40)  # n = 128: 15 rounds swing ±20 %
        columns = ["variant", "d", "n", "engine", "s", "torch s", "×torch", "×torch best"]
        print_table(table, [*columns, "rel.err"])


if __name__ == "__main__":
    main()
