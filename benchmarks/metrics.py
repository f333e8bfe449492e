"""Metrics against POT in the same run: Bures distance, exact W2, Sinkhorn divergence.

    python benchmarks/metrics.py            # Bures d ≤ 512, 10⁴ batched pairs, W2, Sinkhorn n ≤ 10⁴
    python benchmarks/metrics.py --quick    # Bures d ≤ 64, Sinkhorn n = 10³

Every row reports the median wall time after a warm-up, the error against POT, and
"×POT" = POT's time / tpde's time (above 1: tpde is faster), both measured in this run.

- Bures: POT's ``ot.gaussian.bures_wasserstein_distance`` (numpy, two sqrtm by eigh)
  against :func:`tpde.metrics.bures_wasserstein` (Cholesky + eigvalsh), float64 and float32.
- Batched Bures: 10⁴ pairs at d = 8, POT's ``paired=True`` batch against one tpde call.
- Exact W2: ``ot.emd2`` against :func:`tpde.metrics.w2` (same network simplex; the ratio
  is tpde's overhead: cost matrix and value in torch, the autograd term).
- Sinkhorn divergence, d = 2, cost |x − y|²/2, ε = blur²: POT's converged ``ot.sinkhorn``
  (numpy float64, stopThr 1e-9; plain scalings at blur 0.5, log domain at blur 0.1 where
  the plain kernel underflows) against :func:`tpde.metrics.sinkhorn_divergence` (GeomLoss,
  ε-scaling 0.9; float64 at n = 10³, float32 at n = 10⁴). The divergence needs three OT
  solves; POT is timed for all three at (10³, blur 0.5) and for the cross term OT_ε(μ, ν)
  alone otherwise (a lower bound of its divergence time: ×POT then understates tpde).
  Error: |S_tpde − S_POT| / S_POT for three solves; otherwise the relative error of
  GeomLoss's OT_ε(μ, ν) (debias=False, same engine) against POT's.
"""

# ruff: noqa: E402  (numpy's thread count must be set before numpy is imported, below)
from __future__ import annotations

import argparse
import os
import sys

# One BLAS / OpenMP thread for numpy (POT) as for torch, set before numpy loads: on a shared
# 2-core machine, two threads per library oversubscribe the cores and POT's eigh slows 10×+.
_threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, _threads)

import warnings

import numpy as np
import ot
import torch
from _common import print_table, timed
from geomloss import SamplesLoss

from tpde._engines.keops import keops_status
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, sinkhorn_divergence, w2
from tpde.metrics.sinkhorn import pick_sinkhorn_engine


def random_spd(d: int, generator, batch=()) -> torch.Tensor:
    g = torch.randn(*batch, d, d, generator=generator, dtype=torch.float64)
    return g @ g.mT / d + 0.1 * torch.eye(d, dtype=torch.float64)


def bures_rows(dims, generator):
    rows = []
    for d in dims:
        m0, m1 = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(2))
        S0, S1 = random_spd(d, generator), random_spd(d, generator)
        args = [t.numpy() for t in (m0, m1, S0, S1)]
        pot_s, _, pot = timed(lambda a=args: ot.gaussian.bures_wasserstein_distance(*a), 5)
        rows.append({"metric": "bures", "case": f"d={d}", "tool": "POT f64", "s": pot_s})
        for dtype in (torch.float64, torch.float32):
            g0, g1 = Gaussian(m0.to(dtype), S0.to(dtype)), Gaussian(m1.to(dtype), S1.to(dtype))
            s, _, ours = timed(lambda a=g0, b=g1: bures_wasserstein(a, b), 5)
            rows.append(
                {
                    "metric": "bures",
                    "case": f"d={d}",
                    "tool": f"tpde {str(dtype)[6:]}",
                    "s": s,
                    "rel.err": abs(float(ours) - float(pot)) / float(pot),
                    "×POT": pot_s / s,
                }
            )
    return rows


def batched_bures_rows(pairs: int, d: int, generator):
    means = [torch.randn(pairs, d, generator=generator, dtype=torch.float64) for _ in range(2)]
    covs = [random_spd(d, generator, batch=(pairs,)) for _ in range(2)]
    args = [t.numpy() for t in (*means, *covs)]

    def pot_call(a=args):
        return ot.gaussian.bures_wasserstein_distance(*a, paired=True)

    pot_s, _, pot = timed(pot_call, 3)
    case = f"{pairs} pairs, d={d}"
    rows = [{"metric": "bures batched", "case": case, "tool": "POT f64", "s": pot_s}]
    g0, g1 = Gaussian(means[0], covs[0]), Gaussian(means[1], covs[1])
    s, _, ours = timed(lambda: bures_wasserstein(g0, g1), 3)
    error = float(np.max(np.abs(ours.numpy() - pot) / pot))
    rows.append(
        {"metric": "bures batched", "case": case, "tool": "tpde f64", "s": s, "rel.err": error,
         "×POT": pot_s / s}
    )  # fmt: skip
    return rows


def w2_rows(sizes, generator):
    rows = []
    for n in sizes:
        x = torch.randn(n, 2, generator=generator, dtype=torch.float64)
        y = torch.randn(n, 2, generator=generator, dtype=torch.float64) + 1.0
        a = np.full(n, 1 / n)
        pot_s, _, pot = timed(lambda x=x, y=y, a=a: ot.emd2(a, a, ot.dist(x.numpy(), y.numpy())), 3)
        rows.append({"metric": "w2 exact", "case": f"n={n}, d=2", "tool": "POT emd2", "s": pot_s})
        mu, nu = Empirical(x), Empirical(y)
        s, _, ours = timed(lambda mu=mu, nu=nu: w2(mu, nu), 3)
        rows.append(
            {"metric": "w2 exact", "case": f"n={n}, d=2", "tool": "tpde w2", "s": s,
             "rel.err": abs(float(ours) ** 2 - pot) / pot, "×POT": pot_s / s}
        )  # fmt: skip
    return rows


NOT_CONVERGED: set[str] = set()  # POT methods that warned "did not converge" in this case


def pot_entropic(x: np.ndarray, y: np.ndarray, eps: float, method: str) -> float:
    """OT_ε with cost |x − y|²/2 + ε KL(π | a⊗b), from POT's converged scalings (dual value).

    ``method``: "sinkhorn" (plain scalings; fine while exp(−C/ε) does not underflow) or
    "sinkhorn_log" (log domain; needed for small ε, 25–50× slower per iteration).
    """
    n, m = len(x), len(y)
    a, b = np.full(n, 1 / n), np.full(m, 1 / m)
    M = ot.dist(x, y) / 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, log = ot.sinkhorn(a, b, M, eps, method=method, log=True, stopThr=1e-9,
                             numItermax=10**4)  # fmt: skip
    if any("did not converge" in str(w.message) for w in caught):
        NOT_CONVERGED.add(method)
    if method == "sinkhorn_log":
        return float(eps * (a @ (log["log_u"] - np.log(a)) + b @ (log["log_v"] - np.log(b))))
    return float(eps * (a @ np.log(log["u"] / a) + b @ np.log(log["v"] / b)))


def sinkhorn_rows(cases, generator):
    """cases: (n, blur, POT method, number of POT solves: 3 = the divergence, 1 = cross term)."""
    rows = []
    keops_ok, reason = keops_status()
    if not keops_ok:
        print(f"KeOps skipped for Sinkhorn: {reason}")
    for n, blur, method, solves in cases:
        eps = blur**2
        dtype = torch.float64 if n <= 1000 else torch.float32
        x = torch.randn(n, 2, generator=generator, dtype=torch.float64)
        y = 0.7 * torch.randn(n, 2, generator=generator, dtype=torch.float64) + 0.5
        xn, yn = x.numpy(), y.numpy()
        case = f"n={n}, d=2, blur={blur}"

        def pot_call(xn=xn, yn=yn, eps=eps, method=method, solves=solves):
            cross = pot_entropic(xn, yn, eps, method)
            if solves == 1:
                return cross
            selfs = pot_entropic(xn, xn, eps, method) + pot_entropic(yn, yn, eps, method)
            return cross - 0.5 * selfs

        pot_s, pot_mb, pot = timed(pot_call, repeat=1, budget_s=300)
        what = "3 solves" if solves == 3 else "cross term only"
        if method in NOT_CONVERGED:  # stopThr 1e-9 not reached in 10⁴ iterations
            what += ", 10⁴ it. without convergence: time is a lower bound"
            NOT_CONVERGED.discard(method)
        rows.append({"metric": "sinkhorn", "case": case, "tool": f"POT {method} ({what})",
                     "s": pot_s, "MB": pot_mb / 2**20})  # fmt: skip
        mu, nu = Empirical(x.to(dtype)), Empirical(y.to(dtype))
        engines = ["dense"]
        if keops_ok and n > 1000:
            engines.append("multiscale")
        for engine in engines:

            def call(e=engine, b=blur, mu=mu, nu=nu):
                return sinkhorn_divergence(mu, nu, blur=b, engine=e)

            s, mb, ours = timed(call, 3)
            if solves == 3:
                error = abs(float(ours) - pot) / abs(pot)
            else:  # the cross term alone, by the same GeomLoss engine
                backend = {"dense": "tensorized", "multiscale": "multiscale"}[engine]
                loss = SamplesLoss("sinkhorn", p=2, blur=blur, scaling=0.9, debias=False,
                                   backend=backend)  # fmt: skip
                cross = float(loss(mu.weights, mu.points, nu.weights, nu.points))
                error = abs(cross - pot) / abs(pot)
            auto = pick_sinkhorn_engine(n, n, 2)
            name = f"tpde {engine}{' (=auto)' if engine == auto else ''} {str(dtype)[6:]}"
            rows.append({"metric": "sinkhorn", "case": case, "tool": name, "s": s,
                         "MB": mb / 2**20, "rel.err": error, "×POT": pot_s / s})  # fmt: skip
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a shared 2-core "
        "machine two threads slow small operations 10-40x, DESIGN.md)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    load = os.getloadavg()
    print(
        f"torch {torch.__version__}, POT {ot.__version__}, {torch.get_num_threads()} threads; "
        f"load average at start {load[0]:.1f} on {os.cpu_count()} cores"
    )
    rows = bures_rows([16, 64] if args.quick else [16, 64, 512], generator)
    rows += batched_bures_rows(10_000, 8, generator)
    rows += w2_rows([300] if args.quick else [500, 1000], generator)
    cases = [(1000, 0.5, "sinkhorn", 3)]
    if not args.quick:
        cases += [(1000, 0.1, "sinkhorn_log", 1), (10_000, 0.5, "sinkhorn", 1)]
    rows += sinkhorn_rows(cases, generator)
    print_table(rows, ["metric", "case", "tool", "s", "MB", "rel.err", "×POT"])
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
