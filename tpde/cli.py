"""The ``tpde`` command: ``tpde run [--quick] [--out DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def demo(out: Path, quick: bool) -> str:
    """A Gaussian and its particle cloud flowed by the same softmax field; one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from tpde.attention import Softmax
    from tpde.flows import integrate
    from tpde.measures import Empirical, Gaussian

    A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=torch.float64)
    V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]], dtype=torch.float64)
    field = Softmax.from_interaction(A, V)
    g0 = Gaussian(torch.tensor([0.5, -0.3]), torch.tensor([[1.0, 0.3], [0.3, 0.5]])).to(
        dtype=torch.float64
    )
    n = 2_000 if quick else 20_000
    cloud = Empirical.from_gaussian(g0, n, generator=torch.Generator().manual_seed(0))
    gauss = integrate(field, g0, 1.0, dt=0.01, save=5)
    parts = integrate(field, cloud, 1.0, dt=0.05, save=5)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(parts), figsize=(3 * len(parts), 3), sharex=True, sharey=True)
    for ax, t, g, mu in zip(axes, parts.times, gauss.measures, parts.measures, strict=True):
        x = mu.points.numpy()
        ax.scatter(x[:, 0], x[:, 1], s=1, alpha=0.3)
        evals, evecs = torch.linalg.eigh(g.cov())
        angle = torch.linspace(0, 2 * torch.pi, 100, dtype=torch.float64)
        circle = torch.stack([angle.cos(), angle.sin()], 1)
        ellipse = g.mean() + 2 * circle @ (evecs * evals.sqrt()).T
        ax.plot(*ellipse.numpy().T, color="C3")
        ax.set_title(f"t = {float(t):.2f}")
    fig.suptitle("softmax attention: particles (dots) vs Gaussian ODE (2σ ellipse)")
    fig.tight_layout()
    path = out / "demo.png"
    fig.savefig(path, dpi=100)
    cov_error = float((parts.final.cov() - gauss.final.cov()).norm() / gauss.final.cov().norm())
    return (
        f"demo: {n} particles and the Gaussian ODE to t = 1; statuses {parts.status}/"
        f"{gauss.status}; relative covariance gap {cov_error:.3f}; figure {path}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tpde", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the main job and write its figures")
    run.add_argument("--out", type=Path, default=Path("results"))
    run.add_argument("--quick", action="store_true", help="reduced sizes (minutes on 2 cores)")
    args = parser.parse_args(argv)
    if args.command == "run":
        print(demo(args.out / "demo", args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
