"""Particle JKO steps against one explicit RK4 step of the same flow, in the same run.

    python benchmarks/jko.py            # n ∈ {10³, 10⁴}, d ∈ {2, 16} (a few minutes on 2 cores)
    python benchmarks/jko.py --quick    # n = 10³ only

Softmax attention with V = I, A = −I/√d (s = −1: the PDE descends G = E), float32 clouds,
τ = 0.05, the "auto" engine (SDPA's flash kernel on the CPU: the n² sum of E and its
gradient in O(n) memory). For each geometry ("w2": the W2 gradient flow of E; "twisted":
the softmax PDE itself, metric frozen at μ_k) a row reports the seconds of one JKO step,
its L-BFGS iterations and energy evaluations, the final relative gradient, the seconds of
one RK4 step (dt = τ) of the geometry's explicit flow (GradientFlowField for "w2", the
field for "twisted"), the ratio of the two, and the errors of both after time τ against
the same flow by RK4 with dt = τ/20, relative to the displacement: ‖y − y_ref‖/‖y_ref − x‖
(the JKO step is first order, O(τ); RK4 with dt = τ is fourth order but explicit: the W2
flow of E is stiff — velocities ∝ Z_μ(x) reach hundreds at the cloud's edge — and RK4
with dt = τ diverges there (inf/nan), while the implicit step stays stable).
Target: n = 10⁴ under 5 s per step.
"""

from __future__ import annotations

import argparse
import math

import torch
from _common import print_table, timed

from tpde.fields import GradientFlowField, Softmax
from tpde.flows import integrate, jko_step
from tpde.measures import Empirical

TAU = 0.05
TARGET_S = 5.0


def run(n: int, d: int, generator: torch.Generator) -> list[dict]:
    A = -torch.eye(d) / math.sqrt(d)
    field = Softmax.from_interaction(A, torch.eye(d))
    mu = Empirical(torch.randn(n, d, generator=generator))
    rows = []
    for geometry, explicit in (("w2", GradientFlowField(field)), ("twisted", field)):
        jko_s, _, step = timed(lambda g=geometry: jko_step(mu, field, TAU, g), repeat=2)
        rk4_s, _, traj = timed(
            lambda e=explicit: integrate(e, mu, TAU, dt=TAU, method="rk4"), repeat=2
        )
        reference = integrate(explicit, mu, TAU, dt=TAU / 20, method="rk4").final.points
        moved = (reference - mu.points).norm()

        def error(points, reference=reference, moved=moved):
            return float((points - reference).norm() / moved)

        rows.append(
            {
                "n": n,
                "d": d,
                "geometry": geometry,
                "jko_s": jko_s,
                "iterations": step.iterations,
                "evaluations": step.evaluations,
                "grad_norm": step.grad_norm,
                "converged": step.converged,
                "rk4_s": rk4_s,
                "jko/rk4": jko_s / rk4_s,
                "jko_err": error(step.measure.points),
                "rk4_err": error(traj.final.points),
                f"< {TARGET_S:g} s": "yes" if jko_s < TARGET_S else "NO",
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 10³ only")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    sizes = (1_000,) if args.quick else (1_000, 10_000)
    rows = [row for n in sizes for d in (2, 16) for row in run(n, d, generator)]
    columns = list(rows[0])
    print()
    print_table(rows, columns)


if __name__ == "__main__":
    main()
