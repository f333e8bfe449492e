r"""GLPR's phase diagram as a tpde computation: cluster density over β × t (MATH.md §7).

Geshkovski, Letrouit, Polyanskiy and Rigollet ("A mathematical perspective on Transformers",
arXiv:2312.10794) draw, for each β, systems of n tokens uniform on S^{d−1} and flow them by
the sphere model with Q = K = V = I and score β⟨x, y⟩ (their "SA" dynamics, self-attention
included); the cluster density is the share of pairs i ≠ j with ⟨x_i, x_j⟩ > 0.999, averaged
over the systems, at checkpoints in [0, t1]. Here every β and every system is one batch:
the points are (nβ, S, n, d), the interaction βI is (nβ, 1, d, d) and broadcasts over the
systems (:class:`~tpde.fields.Normalized` notes), and one ``integrate`` call advances
the whole diagram from one checkpoint to the next. The run is chained over the checkpoints
rather than saving every state: 200 saved states of GLPR's 2048 × 90 systems would take
19 GB.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import uniform_on_sphere
from tpde.metrics import cluster_density

__all__ = [
    "DiagramRun",
    "DiagramTable",
    "check_diagram_size",
    "checkpoint_times",
    "density_stats",
    "density_table",
    "post_ln",
    "sa_field",
    "sampled_density_stats",
    "systems_for",
]


def checkpoint_times(t1: float, count: int) -> np.ndarray:
    """GLPR's checkpoints: ``count`` equally spaced times in [0, t1], as their times_list
    (torch.linspace in float64, whose last digits can differ from numpy's)."""
    return torch.linspace(0.0, float(t1), int(count), dtype=torch.float64).numpy()


def sa_field(betas, d: int) -> Softmax:
    """Softmax with Q = K = V = I and score β⟨x, y⟩ for every β at once: A = βI of shape
    (nβ, 1, d, d), broadcasting over a batch of systems (nβ, S, n, d)."""
    beta = torch.as_tensor(np.asarray(betas, dtype=float), dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    return Softmax.from_interaction(beta.reshape(-1, 1, 1, 1) * eye, eye)


def check_diagram_size(betas: int, systems: int, tokens: int) -> None:
    """Raise ValueError for a diagram with no β, no system or fewer than 2 tokens."""
    if betas < 1 or systems < 1:
        raise ValueError(
            "a phase diagram needs at least one value of β and one system per β; received "
            f"betas = {betas}, systems = {systems}."
        )
    if tokens < 2:
        raise ValueError(
            "a phase diagram needs at least 2 tokens per system (the cluster density counts "
            f"pairs of tokens); received tokens = {tokens}."
        )


def systems_for(betas: int, systems: int, tokens: int, d: int, generator):
    """Initial tokens, (betas, systems, tokens, d), i.i.d. uniform on S^{d−1}: a fresh draw of
    systems per β, as GLPR's loop draws afresh for each β."""
    check_diagram_size(betas, systems, tokens)
    return uniform_on_sphere(tokens, d, batch=(betas, systems), generator=generator)


class DiagramTable:
    """A density table: ``mean`` and ``se`` (nβ, T) over the systems, the stepping cost.

    ``mean[b, k]`` is GLPR's cluster density of β_b at ``times[k]`` (the mean over the
    systems of each system's share of linked pairs; every system has n(n − 1) pairs, so it
    is also the pooled share GLPR compute); ``se`` its Monte-Carlo standard error
    (standard deviation over the systems / √S). ``seconds``: wall time of the integrate
    calls (densities excluded); ``steps``: steps of the batch (loop iterations); ``rhs``:
    field evaluations; ``status``: the statuses other than "completed" met on the way.
    """

    def __init__(self, mean, se, times, seconds: float, steps: int, rhs: int, status=()):
        self.mean, self.se, self.times = mean, se, np.asarray(times, dtype=float)
        self.seconds, self.steps, self.rhs, self.status = seconds, steps, rhs, status

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(1, self.steps)


def density_stats(mu, delta: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """Cluster density of a batch of clouds (nβ, S, n, d), averaged over the systems (last
    batch dimension): (mean (nβ,), Monte-Carlo standard error (nβ,))."""
    per_system = cluster_density(mu, delta).to(torch.float64)  # (nβ, S)
    count = per_system.shape[-1]
    mean = per_system.mean(-1)
    spread = per_system.std(-1) if count > 1 else torch.zeros_like(mean)
    return mean.cpu().numpy(), (spread / math.sqrt(count)).cpu().numpy()


def sampled_density_stats(mu, delta: float, pairs: int, generator) -> tuple[np.ndarray, ...]:
    """:func:`density_stats` of clouds of equally weighted tokens from ``pairs`` pairs i ≠ j
    drawn uniformly per cloud (the same index pairs in every cloud): each cloud's share of
    linked pairs is then an unbiased estimate (binomial error ≤ 0.5/√pairs, inside the
    standard error over the systems; with one system, the standard error is that binomial
    error alone), O(pairs·d) per cloud instead of O(n²d) — for clouds
    of thousands of tokens, where the exact count costs more than the flow."""
    points = mu.points
    n = points.shape[-2]
    first = torch.randint(n, (pairs,), generator=generator)
    second = (first + torch.randint(1, n, (pairs,), generator=generator)) % n  # ≠ first
    cosine = (points[..., first, :] * points[..., second, :]).sum(-1)
    per_system = (cosine > 1 - delta).to(torch.float64).mean(-1)  # (nβ, S)
    count = per_system.shape[-1]
    mean = per_system.mean(-1)
    if count > 1:
        se = per_system.std(-1) / math.sqrt(count)
    else:  # one system: only the binomial error of the sampled pairs is known
        se = torch.sqrt(mean * (1 - mean) / pairs)
    return mean.cpu().numpy(), se.cpu().numpy()


class DiagramRun:
    """A batch of token clouds flowed by tpde from checkpoint to checkpoint (module notes).

    :meth:`advance_to` runs one ``integrate`` call from the current time to the next, the
    state carried over; the step is ``dt`` when given (fixed-step methods shorten the last
    step of an interval to land on it), else the interval over ``steps_per_interval``.
    ``seconds`` (wall time of the integrate calls), ``steps`` (steps of the batch) and
    ``rhs`` (field evaluations) accumulate.
    """

    def __init__(self, field, mu0, *, method="rk4", steps_per_interval=1, dt=None):
        self.field, self.mu, self.time = field, mu0, 0.0
        self.method, self.steps_per_interval, self.dt = method, int(steps_per_interval), dt
        self.seconds, self.steps, self.rhs = 0.0, 0, 0
        self.statuses: set[str] = set()

    def advance_to(self, target: float) -> None:
        target = float(target)
        if target <= self.time:
            return
        h = self.dt if self.dt is not None else (target - self.time) / self.steps_per_interval
        start = time.perf_counter()
        traj = integrate(self.field, self.mu, target, t0=self.time, dt=h, method=self.method,
                         events=())  # fmt: skip
        self.seconds += time.perf_counter() - start
        self.steps += traj.stats["n_iterations"]
        self.rhs += traj.stats["n_rhs"]
        self.statuses |= {str(s) for s in np.asarray(traj.status).ravel()} - {"completed"}
        self.mu, self.time = traj.final, target


def density_table(field, mu0, times, *, delta: float = 1e-3, progress=None, pairs=None,
                  generator=None, **options) -> DiagramTable:  # fmt: skip
    """Cluster density of a batch of token clouds (nβ, S, n, d) at each of ``times``
    (increasing, ≥ 0): a :class:`DiagramRun` (``options``: its method, steps_per_interval,
    dt) through the times. ``progress``: an optional wrapper of the iterator. ``pairs``
    (with a torch ``generator``): the density from that many sampled pairs per cloud
    (:func:`sampled_density_stats`), else from all pairs."""
    run = DiagramRun(field, mu0, **options)
    times = np.asarray(times, dtype=float)
    means, ses = [], []
    for target in progress(times) if progress is not None else times:
        run.advance_to(target)
        if pairs is None:
            mean, se = density_stats(run.mu, delta)
        else:
            mean, se = sampled_density_stats(run.mu, delta, pairs, generator)
        means.append(mean)
        ses.append(se)
    return DiagramTable(np.stack(means, -1), np.stack(ses, -1), times, run.seconds, run.steps,
                        run.rhs, sorted(run.statuses))  # fmt: skip


def post_ln(betas, d: int, *, tangent: bool = True) -> Normalized:
    """The sphere model (post-LN) of :func:`sa_field`: tangent velocity (every method keeps its
    order) or, ``tangent=False``, GLPR's layer x ← N(x + hΓ) under Euler."""
    return Normalized(sa_field(betas, d), "post-ln", tangent=tangent)
