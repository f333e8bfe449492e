"""Per-run work of ``integrate``: what is decided once per run, and the price of one step.

    python benchmarks/flows_per_run.py

Issue 26 asked that a run decide once what does not change during it: the start measure is
checked once, the field's capabilities are asked once, one ``Auto`` is built. This script
counts, in one ``integrate`` of a 30-step particle run (softmax, n = 64 tokens in d = 8,
rk4 at dt = 1/30, and the same run with the default "auto"), the calls of the fields'
``check_measure`` (outermost calls only: a wrapper checking its parts counts once) and of
``supports`` (every call, any field), and the number of ``Auto`` objects built.

It then times one right-hand side as the loop evaluates it (``ParticleSystem.rhs`` through
the loop's call wrapper) against the bare field, ``field.particle_velocity`` on the same
points: the ratio is the loop's overhead per evaluation, measured in one process (no
machine-to-machine noise). One thread; median of 7 repeats of 200 calls each.
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import statistics
import sys
import time
from contextlib import contextmanager

import torch

import tpde.attention as attention
from tpde import flows
from tpde.fields import MLP, Field, Normalized, Softmax
from tpde.flows import Auto, ParticleSystem, integrate
from tpde.measures import Empirical

F64 = torch.float64


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@contextmanager
def counting():
    """Count outermost ``check_measure`` calls, every ``supports`` call, Auto objects."""
    counts = {"check_measure": 0, "check_measure_all": 0, "supports": 0, "Auto": 0}
    depth = [0]
    saved = []

    def wrap_check(original):
        def check(self, mu):
            counts["check_measure_all"] += 1
            if depth[0] == 0:
                counts["check_measure"] += 1
            depth[0] += 1
            try:
                return original(self, mu)
            finally:
                depth[0] -= 1

        return check

    for cls in (Field, *_subclasses(Field)):
        if "check_measure" in cls.__dict__:
            saved.append((cls, "check_measure", cls.__dict__["check_measure"]))
            cls.check_measure = wrap_check(cls.__dict__["check_measure"])
    # The function ``supports`` (Field.supports calls it) and every module that imported it.
    base_supports = sys.modules[Field.supports.__module__].supports
    modules = [m for n, m in sys.modules.items() if n.startswith("tpde") and m is not None]
    patched = [m for m in modules if getattr(m, "supports", None) is base_supports]

    def module_supports(field, capability):
        counts["supports"] += 1
        return base_supports(field, capability)

    for m in patched:
        m.supports = module_supports
    original_init = Auto.__init__

    def init(self, *args, **kwargs):
        counts["Auto"] += 1
        original_init(self, *args, **kwargs)

    Auto.__init__ = init
    saved.append((Auto, "__init__", original_init))
    try:
        yield counts
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)
        for m in patched:
            m.supports = base_supports


def problem(n: int = 64, d: int = 8, layer: bool = False):
    """Softmax attention on n tokens in d; ``layer``: a Post-LN Transformer layer instead
    (attention and an MLP, each behind its own LayerNorm: a sum stepped by Lie–Trotter)."""
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(d, d, generator=gen, dtype=F64) / d
    field = Softmax(Q, Q, torch.eye(d, dtype=F64))
    mu = Empirical(torch.randn(n, d, generator=gen, dtype=F64))
    if layer:
        m = 2 * d
        mlp = MLP(
            torch.randn(m, d, generator=gen, dtype=F64) / d,
            torch.zeros(m, dtype=F64),
            torch.randn(d, m, generator=gen, dtype=F64) / m,
            torch.zeros(d, dtype=F64),
        )
        field = Normalized(field, "post-ln") + Normalized(mlp, "post-ln")
        mu = Empirical(
            Normalized(Softmax(Q, Q, torch.eye(d, dtype=F64)), "post-ln").project(mu.points)
        )
    return field, mu


def per_run_counts(method: str, layer: bool = False) -> dict:
    field, mu = problem(layer=layer)
    options = {} if method == "auto" else {"dt": 1 / 30}
    integrate(field, mu, 1.0, method=method, **options)  # warm-up (lazy imports)
    with counting() as counts:
        traj = integrate(field, mu, 1.0, method=method, **options)
    counts["steps"] = traj.stats["n_steps"] + traj.stats["n_rejected"]
    return counts


def rhs_ratio(repeat: int = 7, calls: int = 200) -> float:
    field, mu = problem()
    system = ParticleSystem(field, mu)
    state = system.initial()
    points = state[0]

    def loop_rhs():
        for _ in range(calls):
            system.rhs(0.0, state)

    def bare():
        for _ in range(calls):
            field.particle_velocity(0.0, mu, points, "auto")

    ratios = []
    for _ in range(repeat):
        times = []
        for fn in (loop_rhs, bare):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        ratios.append(times[0] / times[1])
    return statistics.median(ratios)


def main() -> None:
    torch.set_num_threads(1)
    print(f"tpde.flows at {os.path.dirname(flows.__file__)}; attention {attention.__name__}")
    runs = (
        ("softmax", "rk4", False),
        ("softmax", "auto", False),
        ("post-ln layer", "lie-trotter", True),
    )
    for what, method, layer in runs:
        c = per_run_counts(method, layer)
        print(
            f"{what}, {method}: {c['steps']} steps; check_measure {c['check_measure']} "
            f"(nested included {c['check_measure_all']}), supports {c['supports']} "
            f"({c['supports'] / c['steps']:.2f} per step), Auto built {c['Auto']}"
        )
    print(f"one right-hand side, loop / bare field (n = 64, d = 8): {rhs_ratio():.3f}")


if __name__ == "__main__":
    main()
