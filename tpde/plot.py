"""Pictures of measures and flows: :func:`draw` one measure, :func:`animate` a trajectory.

Particles (:class:`~tpde.measures.Empirical`) are drawn as a scatter of two coordinates,
Gaussians as the ellipse {x : (x − α)ᵀΣ⁻¹(x − α) = k²} of their marginal on those
coordinates (one per batch element) with the mean marked, and grids as an image of the
density (cell mass / cell area; a curve in d = 1). :func:`animate` writes one frame per
saved measure into a GIF with matplotlib's Pillow writer (no ffmpeg needed).

matplotlib is imported inside the functions, so ``import tpde`` does not load it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = ["animate", "draw"]

_KINDS = (Empirical, Gaussian, Grid)


def _kind(measure) -> type:
    for kind in _KINDS:
        if isinstance(measure, kind):
            return kind
    raise TypeError(
        f"can only draw an Empirical, a Gaussian or a Grid; received {type(measure).__name__}."
    )


def _check_dims(dims, d: int) -> tuple[int, int]:
    if d < 2:
        raise ValueError(
            f"draw shows two coordinates of particles and Gaussians; this measure has d = {d}. "
            "Put a 1-D density on a Grid (Grid.from_gaussian or Grid.from_empirical) to plot it."
        )
    dims = tuple(dims)
    if len(dims) != 2 or any(not isinstance(i, int) or not 0 <= i < d for i in dims):
        raise ValueError(f"dims must be two coordinate indices in [0, {d - 1}]; received {dims!r}.")
    if dims[0] == dims[1]:
        raise ValueError(f"dims must be two different coordinates; received {dims!r}.")
    return dims


def _positive(value, name: str) -> float:
    """A finite number > 0 (a size, a scale, a rate)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number; received {value!r}.")
    number = float(value)
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"{name} must be > 0 and finite; received {value!r}.")
    return number


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def _ellipses(g: Gaussian, dims, sigmas: float) -> tuple[np.ndarray, np.ndarray]:
    """(means (b, 2), curves (b, 100, 2)): the k-σ ellipses of the marginals on ``dims``."""
    index = list(dims)
    mean = _numpy(g.mean()[..., index]).reshape(-1, 2)
    cov = _numpy(g.cov()[..., index, :][..., index]).reshape(-1, 2, 2)
    evals, evecs = np.linalg.eigh(0.5 * (cov + cov.swapaxes(-1, -2)))
    angle = np.linspace(0, 2 * math.pi, 100)
    circle = np.stack([np.cos(angle), np.sin(angle)], 1)
    axes = evecs * np.sqrt(np.clip(evals, 0, None))[:, None, :]
    curves = mean[:, None, :] + sigmas * circle @ axes.swapaxes(-1, -2)
    return mean, curves


def _grid_image(grid: Grid) -> np.ndarray:
    """Density values (cell mass / cell volume), shape ``grid.shape``."""
    return _numpy(grid.density) / float(torch.prod(grid.cell_size))


def draw(
    measure,
    ax=None,
    *,
    dims: Sequence[int] = (0, 1),
    sigmas: float = 2.0,
    color=None,
    size: float | None = None,
    cmap: str = "Greys",
    vmax: float | None = None,
    label: str | None = None,
):
    """Draw one measure on a matplotlib Axes.

    Parameters
    ----------
    measure : Empirical, Gaussian (batched: one ellipse per element) or Grid.
    ax : matplotlib Axes, optional
        Default: the current Axes of pyplot.
    dims : two coordinates shown for particles and Gaussians (default the first two).
    sigmas : the Gaussian ellipse is the level set at ``sigmas`` standard deviations.
    color : colour of the particles or ellipses (default: the Axes' next colour).
    size : marker area of a particle of mass 1/n (points²); default 4 below 2000 particles,
        1 beyond. Weighted particles scale with their mass.
    cmap, vmax : colour map and top of the colour scale of a grid image (default: the
        image's maximum).
    label : legend label.

    Returns
    -------
    list of the matplotlib artists drawn.
    """
    kind = _kind(measure)
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    elif not callable(getattr(ax, "scatter", None)):
        raise TypeError(f"ax must be a matplotlib Axes; received {type(ax).__name__}.")
    sigmas = _positive(sigmas, "sigmas")
    if size is not None:
        _positive(size, "size")
    if vmax is not None:
        _positive(vmax, "vmax")
    if kind is Grid:
        image = _grid_image(measure)
        lower, upper = _numpy(measure.lower), _numpy(measure.upper)
        if measure.dim == 1:
            (line,) = ax.plot(_numpy(measure.axes()[0]), image, color=color, label=label)
            return [line]
        top = float(image.max()) if vmax is None else vmax
        art = ax.imshow(
            image.T,
            origin="lower",
            extent=(lower[0], upper[0], lower[1], upper[1]),
            cmap=cmap,
            vmin=0.0,
            vmax=top if top > 0 else 1.0,
            aspect="auto",
            interpolation="nearest",
            label=label,
        )
        return [art]
    dims = _check_dims(dims, measure.dim)
    if kind is Empirical and measure.batch_shape != ():
        raise ValueError(
            f"draw shows one particle cloud; received a batch of shape "
            f"{tuple(measure.batch_shape)}. Draw each element, mu[i], on its own."
        )
    if kind is Empirical:
        points = _numpy(measure.points[:, list(dims)])
        n = measure.n
        base = (4.0 if n <= 2000 else 1.0) if size is None else size
        sizes = base * n * _numpy(measure.weights)
        art = ax.scatter(points[:, 0], points[:, 1], s=sizes, color=color, alpha=0.7,
                         linewidths=0, label=label)  # fmt: skip
        return [art]
    means, curves = _ellipses(measure, dims, sigmas)
    artists = []
    for k, (mean, curve) in enumerate(zip(means, curves, strict=True)):
        (line,) = ax.plot(*curve.T, color=color, lw=1.2, label=label if k == 0 else None)
        color = line.get_color()  # the Axes' next colour when none was given: one for all
        (dot,) = ax.plot(*mean, "o", color=color, ms=2.5)
        artists += [line, dot]
    return artists


def _extent(measure, dims, sigmas: float) -> np.ndarray | None:
    """[[xmin, ymin], [xmax, ymax]] of what :func:`draw` shows, or None if nothing finite."""
    if isinstance(measure, Grid):
        if measure.dim == 1:
            return None
        return np.stack([_numpy(measure.lower), _numpy(measure.upper)])
    if isinstance(measure, Empirical):
        points = _numpy(measure.points[:, list(dims)])
    else:
        points = _ellipses(measure, dims, sigmas)[1].reshape(-1, 2)
    points = points[np.isfinite(points).all(1)]
    if len(points) == 0:
        return None
    return np.stack([points.min(0), points.max(0)])


def _limits(measures, dims, sigmas: float):
    boxes = [box for box in (_extent(m, dims, sigmas) for m in measures) if box is not None]
    if not boxes:
        return None
    lo = np.min([b[0] for b in boxes], 0)
    hi = np.max([b[1] for b in boxes], 0)
    pad = 0.05 * np.maximum(hi - lo, 1e-9)
    return (lo[0] - pad[0], hi[0] + pad[0]), (lo[1] - pad[1], hi[1] + pad[1])


def _check_frame_options(fps, figsize, dpi, xlim, ylim, draw_options) -> None:
    """The options of :func:`animate`, before any figure is made."""
    _positive(fps, "fps")
    if isinstance(dpi, bool) or not isinstance(dpi, int) or dpi < 1:
        raise ValueError(f"dpi must be a positive int (dots per inch); received {dpi!r}.")
    for value, name in ((figsize, "figsize"), (xlim, "xlim"), (ylim, "ylim")):
        if value is None and name != "figsize":
            continue
        try:
            pair = [float(v) for v in value]
        except (TypeError, ValueError):
            pair = []
        if len(pair) != 2 or not all(math.isfinite(v) for v in pair):
            raise ValueError(f"{name} must be two finite numbers; received {value!r}.")
        if name == "figsize" and min(pair) <= 0:
            raise ValueError(f"figsize must be two sizes > 0 (inches); received {value!r}.")
        if name != "figsize" and pair[0] == pair[1]:
            raise ValueError(f"{name} must be two different limits; received {value!r}.")
    unknown = sorted(set(draw_options) - {"color", "size", "cmap", "vmax", "label"})
    if unknown:
        raise TypeError(
            f"animate passes color, size, cmap, vmax and label to draw; received unknown "
            f"option(s) {', '.join(unknown)}."
        )


def animate(
    trajectory,
    path,
    *,
    times=None,
    fps: float = 6.0,
    dims: Sequence[int] = (0, 1),
    sigmas: float = 2.0,
    xlim=None,
    ylim=None,
    title: str | None = None,
    figsize: tuple[float, float] = (4.0, 4.0),
    dpi: int = 80,
    **draw_options,
) -> Path:
    """Write a flow as an animated GIF, one frame per saved measure.

    Parameters
    ----------
    trajectory : Trajectory (from :func:`tpde.flows.integrate` or :func:`tpde.flows.jko_flow`)
        or a sequence of measures, all Empirical, all Gaussian or all Grid.
    path : file name ending in ``.gif`` (its folder must exist).
    times : one time per frame, shown in the frame titles; default the trajectory's
        ``times`` (for a plain sequence without times: the frame number).
    fps : frames per second.
    dims, sigmas : as in :func:`draw`.
    xlim, ylim : axis limits, the same on every frame. Default: the box holding every
        frame (particles, ellipses) or the grid's box. Pass limits for a flow that blows up.
    title : text above the time in each frame.
    figsize, dpi : size of a frame (inches, dots per inch).
    **draw_options : passed to :func:`draw` (color, size, cmap, vmax). Grids share one
        colour scale: vmax defaults to the largest density over the frames.

    Returns
    -------
    pathlib.Path of the GIF written.
    """
    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"animate writes a GIF: path must end in '.gif'; received {str(path)!r}.")
    if not path.parent.is_dir():
        raise FileNotFoundError(
            f"animate writes {path}, but its folder {path.parent} does not exist; create it "
            "first (Path(...).mkdir(parents=True))."
        )
    if isinstance(trajectory, Measure):
        raise TypeError(
            f"animate takes a Trajectory or a sequence of measures; received one "
            f"{type(trajectory).__name__}. Draw it with tpde.plot.draw, or pass [measure]."
        )
    _check_frame_options(fps, figsize, dpi, xlim, ylim, draw_options)
    measures = list(trajectory.measures if hasattr(trajectory, "measures") else trajectory)
    if not measures:
        raise ValueError("nothing to animate: the trajectory holds no measure.")
    kinds = {_kind(m) for m in measures}
    if len(kinds) > 1:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise TypeError(f"every frame must be the same kind of measure; received {names}.")
    if times is None and hasattr(trajectory, "times"):
        times = trajectory.times
    if times is not None:
        times = [float(t) for t in times]
        if len(times) != len(measures):
            raise ValueError(
                f"times has {len(times)} entries for {len(measures)} measures; pass one per frame."
            )
    kind = kinds.pop()
    if kind is not Grid:
        _check_dims(dims, measures[0].dim)
    elif "vmax" not in draw_options:
        draw_options["vmax"] = max(float(_grid_image(m).max()) for m in measures)
    limits = _limits(measures, dims, sigmas)
    if kind is Grid and measures[0].dim == 1:  # a curve: the box, and one density scale
        box = (float(measures[0].lower[0]), float(measures[0].upper[0]))
        limits = box, (0.0, 1.05 * draw_options["vmax"] or 1.0)
    xlim = xlim if xlim is not None or limits is None else limits[0]
    ylim = ylim if ylim is not None or limits is None else limits[1]
    # One colour on every frame (a 1-D grid's curve too: no colour cycle across frames).
    draw_options.setdefault("color", "C0")

    from matplotlib.animation import PillowWriter
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    writer = PillowWriter(fps=fps)

    def frame(k: int, previous: list) -> list:
        """Replace the previous frame's artists by frame k's (each frame drawn once)."""
        for artist in previous:
            artist.remove()
        artists = draw(measures[k], ax, dims=dims, sigmas=sigmas, **draw_options)
        if xlim is not None:
            ax.set_xlim(*xlim)
        if ylim is not None:
            ax.set_ylim(*ylim)
        parts = [title] if title else []
        parts.append(f"frame {k + 1}/{len(measures)}" if times is None else f"t = {times[k]:.3g}")
        ax.set_title("   ".join(parts), fontsize=10)
        return artists

    # The first frame is drawn before the writer starts: an error in drawing surfaces as
    # itself, not behind the writer's own error on an empty movie.
    drawn = frame(0, [])
    with writer.saving(fig, path, dpi):
        writer.grab_frame()
        for k in range(1, len(measures)):
            drawn = frame(k, drawn)
            writer.grab_frame()
    return path
