"""Accuracy of the Bures Monge map on near-singular covariances, against a 40-digit reference.

    python benchmarks/bures_accuracy.py            # d = 2, 8, 32 (about 2 minutes)
    python benchmarks/bures_accuracy.py --quick    # d = 2, 8

Cases (tests/metrics/bures_reference.py): eigenvalues U[0.5, 1.5] in a random basis, with a
quarter of them (at least one) at ~1e-8 in Σ₁ ("one"), in Σ₀ ("source") or in both. The
reference T is computed by mpmath at 40 digits from the same float64 matrices. Columns:
relative Frobenius error of

- tpde: :func:`tpde.metrics.bures_monge_map` (SVD of Σ₁^{1/2}Σ₀^{1/2}, tpde/metrics/_monge.py);
- former: tpde's previous route (symmetric square root of Σ₀^{1/2}Σ₁Σ₀^{1/2}, two solves);
- POT: ``ot.gaussian.bures_wasserstein_mapping`` (the same formula as the former route);

and eps·κ, κ the relative condition number of (Σ₀, Σ₁) ↦ T (the error a backward-stable
algorithm may make), with tpde's error in units of it. The last columns time tpde and POT
(median after a warm-up, one thread) and give POT's time / tpde's time.
"""

# ruff: noqa: E402  (numpy's thread count must be set before numpy is imported, below)
from __future__ import annotations

import argparse
import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np
import ot
import torch
from _common import ROOT, print_table, timed

sys.path.insert(0, str(ROOT))  # the oracle lives with the tests

from tests.metrics.bures_reference import CASES, condition_number, pair, reference_monge
from tpde._linalg import sqrtm_psd, symmetrize
from tpde.measures import Gaussian
from tpde.metrics import bures_monge_map

EPS = float(torch.finfo(torch.float64).eps)


def former(S0: torch.Tensor, S1: torch.Tensor) -> torch.Tensor:
    """tpde's Monge matrix before the SVD route (kept here as the baseline)."""
    root0 = sqrtm_psd(S0)
    middle = sqrtm_psd(symmetrize(root0 @ S1 @ root0))
    return symmetrize(torch.linalg.solve(root0, torch.linalg.solve(root0, middle).mT).mT)


def rows_for(d: int, case: str, generator) -> dict:
    S0, S1 = pair(d, case, generator)
    ref = reference_monge(S0, S1)
    bound = EPS * condition_number(S0, S1)
    zero = torch.zeros(d, dtype=torch.float64)
    g0, g1 = Gaussian(zero, S0), Gaussian(zero, S1)
    ours_s, _, ours = timed(lambda: bures_monge_map(g0, g1).matrix, 5)
    args = (zero.numpy(), zero.numpy(), S0.numpy(), S1.numpy())
    pot_s, _, (pot, _) = timed(lambda: ot.gaussian.bures_wasserstein_mapping(*args), 5)

    def err(T) -> float:
        return float((torch.as_tensor(np.asarray(T)) - ref).norm() / ref.norm())

    return {
        "d": d,
        "case": case,
        "tpde": err(ours),
        "former": err(former(S0, S1)),
        "POT": err(pot),
        "eps·κ": bound,
        "tpde/(eps·κ)": err(ours) / bound,
        "tpde ms": 1e3 * ours_s,
        "POT ms": 1e3 * pot_s,
        "×POT": pot_s / ours_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="d = 2, 8 only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, POT {ot.__version__}; load {os.getloadavg()[0]:.1f}")
    dims = [2, 8] if args.quick else [2, 8, 32]
    rows = [rows_for(d, case, generator) for d in dims for case in CASES]
    columns = ["d", "case", "tpde", "former", "POT", "eps·κ", "tpde/(eps·κ)"]
    print_table(rows, [*columns, "tpde ms", "POT ms", "×POT"])


if __name__ == "__main__":
    main()
