"""Eulerian grid step against the Lagrangian particle step, same field, same run.

    python benchmarks/eulerian.py            # up to 256² cells (several minutes on 2 cores)
    python benchmarks/eulerian.py --quick    # up to 64² cells

Softmax attention in d = 2, float32. For N = side² cells, a grid flow evaluates the field
against the N weighted cell centres at the 2·side·(side + 1) ≈ 2N face midpoints; the
particle flow evaluates it against N particles at the N particles. Rows:

- ``eval``: one field evaluation, per engine (grid: faces × cells; particles: N × N), with
  the relative error of the velocity against the closed-form field of the initial
  Gaussian, Γ[N(α, Σ)](x) = V(α + ΣAx) (mass-weighted RMS; for the grid the normal
  components at the faces, weighted by the adjacent cell masses). It measures what each
  representation buys: O(h²) for the grid, O(N^{-1/2}) for particles.
- ``step``: one time step on the fastest engine: grid MUSCL + Heun (2 evaluations) and
  upwind + Euler (1), particles Euler (1) and RK4 (4).

Ratios are against the particle evaluation (or step) of the same N measured in this run.
Engines whose time, extrapolated quadratically from the previous size, would exceed the
budget are skipped ("skip"); "dense" is skipped where its N² scores exceed 4 GiB.
"""

from __future__ import annotations

import argparse
import math

import torch
from _common import print_table, timed

from tpde._engines.keops import keops_status
from tpde.fields import Softmax
from tpde.flows import FiniteVolumes, GridSystem, integrate
from tpde.measures import Empirical, Gaussian, Grid

BUDGET_S = 120.0  # largest predicted time of one timed call we are willing to run
DENSE_BYTES = 4 * 2**30


def setup(side: int, dtype=torch.float32):
    A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]])
    V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]])
    field = Softmax.from_interaction(A.to(dtype), V.to(dtype))
    g0 = Gaussian(torch.tensor([0.5, -0.3]), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
    grid = Grid.from_gaussian(g0.to(dtype=torch.float64), (side, side), -5.0, 5.0).to(dtype=dtype)
    cloud = Empirical(g0.sample(side * side, generator=torch.Generator().manual_seed(0)))
    return field, g0.to(dtype=dtype), grid, cloud.to(dtype=dtype)


def exact_velocity(field, g0, x):
    c, B = field.gaussian_affine(0.0, g0.mean(), g0.cov())
    return c + x @ B.T


def grid_error(flow, grid, field, g0, u_faces):
    """Mass-weighted RMS error of the face normal velocities, relative."""
    exact = exact_velocity(field, g0, flow.faces)
    sizes = [math.prod(s) for s in flow.face_shapes]
    num = den = 0.0
    for k, (u, e, shape) in enumerate(
        zip(u_faces, torch.split(exact, sizes), flow.face_shapes, strict=True)
    ):
        e = e[:, k].reshape(shape)
        m = grid.density
        pad = [0, 0] * m.ndim
        pad[2 * (m.ndim - 1 - k)] = pad[2 * (m.ndim - 1 - k) + 1] = 1
        padded = torch.nn.functional.pad(m, pad)
        n = m.shape[k] + 1
        weight = 0.5 * (padded.narrow(k, 0, n) + padded.narrow(k, 1, n))
        num += float((weight * (u - e) ** 2).sum())
        den += float((weight * e**2).sum())
    return math.sqrt(num / den)


def particle_error(field, g0, cloud, u):
    exact = exact_velocity(field, g0, cloud.points)
    num = float((cloud.weights[:, None] * (u - exact) ** 2).sum())
    return math.sqrt(num / float((cloud.weights[:, None] * exact**2).sum()))


def run(sides, engines):
    rows, last = [], {}
    keops_ok, reason = keops_status()
    if not keops_ok:
        print(f"KeOps skipped: {reason}")
        engines = [e for e in engines if e != "keops"]
    for side in sides:
        field, g0, grid, cloud = setup(side)
        n = side * side
        evals, fastest = {}, None
        for engine in engines:
            flow = GridSystem(field, FiniteVolumes(grid, "muscl"), engine, None, 1.0)
            queries = {"grid": flow.faces.shape[0], "particles": n}
            for kind in ("grid", "particles"):
                key = (kind, engine)
                prev = last.get(key)
                predicted = 0.0 if prev is None else prev[0] * (n / prev[1]) ** 2
                too_big = engine == "dense" and 4 * queries[kind] * n > DENSE_BYTES
                if predicted > BUDGET_S or too_big:
                    rows.append({"N": n, "what": f"{kind} eval", "engine": engine, "s": "skip"})
                    continue
                with torch.no_grad():
                    if kind == "grid":
                        seconds, memory, u = timed(
                            lambda f=flow, m=grid.density: f.velocity(0.0, m), repeat=1
                        )
                        error = grid_error(flow, grid, field, g0, u)
                    else:
                        seconds, memory, u = timed(
                            lambda e=engine, f=field, c=cloud: f.velocity(c, engine=e), repeat=1
                        )
                        error = particle_error(field, g0, cloud, u)
                last[key] = (seconds, n)
                evals[key] = seconds
                rows.append(
                    {
                        "N": n,
                        "what": f"{kind} eval",
                        "engine": engine,
                        "queries": queries[kind],
                        "s": seconds,
                        "MB": memory / 2**20,
                        "rel.err": error,
                    }
                )
        for row in rows:
            if row["N"] == n and ("particles", row["engine"]) in evals and row["s"] != "skip":
                row["×particle eval"] = row["s"] / evals[("particles", row["engine"])]
        done = {e for (kind, e) in evals if kind == "grid"} & {e for (k, e) in evals if k != "grid"}
        if done:
            fastest = min(done, key=lambda e: evals[("grid", e)])
            rows.extend(steps(field, grid, cloud, fastest, n))
    return rows


def steps(field, grid, cloud, engine, n):
    """One step of each scheme on ``engine``; ratios against the particle Euler step."""
    flow = GridSystem(field, FiniteVolumes(grid, "muscl"), engine, None, 1.0)
    with torch.no_grad():
        dt = 0.5 / flow.rate(flow.velocity(0.0, grid.density))
        cases = {
            "grid muscl+heun": lambda: integrate(
                field, FiniteVolumes(grid, "muscl"), dt, dt=dt, engine=engine, events=()
            ),
            "grid upwind+euler": lambda: integrate(
                field, FiniteVolumes(grid, "upwind"), dt, dt=dt, engine=engine, events=()
            ),
            "particles euler": lambda: integrate(
                field, cloud, dt, dt=dt, method="euler", engine=engine, events=()
            ),
            "particles rk4": lambda: integrate(
                field, cloud, dt, dt=dt, method="rk4", engine=engine, events=()
            ),
        }
        times = {name: timed(fn, repeat=1)[0] for name, fn in cases.items()}
    base = times["particles euler"]
    return [
        {"N": n, "what": f"{name} step", "engine": engine, "s": s, "×particle eval": s / base}
        for name, s in times.items()
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engines", nargs="*", default=["sdpa", "chunked", "dense", "keops"])
    args = parser.parse_args()
    sides = [32, 64] if args.quick else [64, 128, 256]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, d = 2")
    rows = run(sides, args.engines)
    columns = ["N", "what", "engine", "queries", "s", "MB", "rel.err", "×particle eval"]
    print_table(rows, columns)
    print(
        "×particle eval: eval rows against the particle eval of the same N and engine; "
        "step rows against the particle Euler step of the same N."
    )


if __name__ == "__main__":
    main()
