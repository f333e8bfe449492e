"""Adversarial inputs to tpde.plot: draw and animate.

Each case asserts a clear error (type and the informative part of the message) or a drawn,
finite figure; "fixed" marks cases that failed before this suite's fixes (NaN ellipses,
matplotlib's 'IndexError: list index out of range' hiding the cause).
"""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from tests.adversarial.strategies import F64, cloud, eye
from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid
from tpde.plot import animate, draw

MU = Empirical(cloud(6, 2))
G = Gaussian(torch.zeros(2, dtype=F64), eye())
GRID2 = Grid(torch.full((4, 4), 1 / 16), -1, 1)


@pytest.fixture(scope="module")
def trajectory():
    return integrate(Softmax(-eye(), eye(), eye()), MU, 0.2, save=3)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


DRAW_ERRORS = {
    "one-dimensional": (
        lambda: draw(Empirical(cloud(6, 1))),
        ValueError,
        "this measure has d = 1. Put a 1-D density on a Grid",
    ),
    "tensor": (
        lambda: draw(cloud(3, 2)),
        TypeError,
        "can only draw an Empirical, a Gaussian or a Grid; received Tensor",
    ),
    "dims-range": (
        lambda: draw(MU, dims=(0, 5)),
        ValueError,
        r"two coordinate indices in \[0, 1\]; received \(0, 5\)",
    ),
    "dims-negative": (lambda: draw(MU, dims=(-1, 0)), ValueError, r"received \(-1, 0\)"),
    "dims-three": (lambda: draw(MU, dims=(0, 1, 2)), ValueError, r"received \(0, 1, 2\)"),
    "dims-float": (lambda: draw(MU, dims=(0.0, 1.0)), ValueError, r"received \(0.0, 1.0\)"),
    "dims-equal": (lambda: draw(MU, dims=(0, 0)), ValueError, "two different coordinates"),
    "sigmas-zero": (
        lambda: draw(G, sigmas=0),
        ValueError,
        "sigmas must be > 0",
    ),
    "sigmas-inf": (
        lambda: draw(G, sigmas=math.inf),
        ValueError,
        "sigmas must be > 0 and finite; received inf",
    ),  # fixed
    "sigmas-nan": (lambda: draw(G, sigmas=math.nan), ValueError, "received nan"),
    "sigmas-str": (
        lambda: draw(G, sigmas="2"),
        TypeError,
        "sigmas must be a number; received '2'",
    ),  # fixed
    "size-negative": (
        lambda: draw(MU, size=-1),
        ValueError,
        "size must be > 0 and finite; received -1",
    ),  # fixed
    "size-nan": (
        lambda: draw(MU, size=math.nan),
        ValueError,
        "size must be > 0 and finite",
    ),  # fixed
    "vmax-zero": (
        lambda: draw(GRID2, vmax=0),
        ValueError,
        "vmax must be > 0 and finite; received 0",
    ),  # fixed
    "ax-int": (
        lambda: draw(MU, ax=3),
        TypeError,
        "ax must be a matplotlib Axes; received int",
    ),  # fixed
    "batched-cloud": (
        lambda: draw(Empirical(cloud(3, 2).expand(2, 3, 2))),
        ValueError,
        r"one particle cloud; received a batch of shape \(2,\)",
    ),  # fixed: a broadcast error, or a wrong figure
}


@pytest.mark.parametrize("case", DRAW_ERRORS.values(), ids=DRAW_ERRORS.keys())
def test_draw_refuses_bad_input_clearly(case):
    build, error, match = case
    with pytest.raises(error, match=match):
        build()


ANIMATE_ERRORS = {
    "png": (lambda tr, d: animate(tr, d / "a.png"), ValueError, r"path must end in '.gif'"),
    "missing-folder": (
        lambda tr, d: animate(tr, d / "nope" / "a.gif"),
        FileNotFoundError,
        "its folder .* does not exist; create it first",
    ),  # fixed
    "one-measure": (
        lambda tr, d: animate(MU, d / "a.gif"),
        TypeError,
        "a Trajectory or a sequence of measures; received one Empirical",
    ),  # fixed: blamed indexing
    "empty": (lambda tr, d: animate([], d / "a.gif"), ValueError, "nothing to animate"),
    "mixed-kinds": (
        lambda tr, d: animate([MU, G], d / "a.gif"),
        TypeError,
        "same kind of measure; received Empirical, Gaussian",
    ),
    "times-count": (
        lambda tr, d: animate(tr, d / "a.gif", times=[5.0]),
        ValueError,
        "times has 1 entries for 3 measures",
    ),
    "fps-zero": (
        lambda tr, d: animate(tr, d / "a.gif", fps=0),
        ValueError,
        "fps must be > 0",
    ),
    "fps-inf": (
        lambda tr, d: animate(tr, d / "a.gif", fps=math.inf),
        ValueError,
        "received inf",
    ),  # fixed
    "dpi-zero": (
        lambda tr, d: animate(tr, d / "a.gif", dpi=0),
        ValueError,
        r"dpi must be a positive int \(dots per inch\); received 0",
    ),  # fixed
    "dpi-float": (
        lambda tr, d: animate(tr, d / "a.gif", dpi=80.5),
        ValueError,
        "received 80.5",
    ),  # fixed
    "figsize-zero": (
        lambda tr, d: animate(tr, d / "a.gif", figsize=(0, 0)),
        ValueError,
        r"figsize must be two sizes > 0 \(inches\)",
    ),  # fixed
    "figsize-one": (
        lambda tr, d: animate(tr, d / "a.gif", figsize=(4,)),
        ValueError,
        "figsize must be two finite numbers",
    ),  # fixed
    "xlim-nan": (
        lambda tr, d: animate(tr, d / "a.gif", xlim=(math.nan, 1)),
        ValueError,
        r"xlim must be two finite numbers; received \(nan, 1\)",
    ),  # fixed
    "ylim-equal": (
        lambda tr, d: animate(tr, d / "a.gif", ylim=(1, 1)),
        ValueError,
        "ylim must be two different limits",
    ),  # fixed
    "unknown-option": (
        lambda tr, d: animate(tr, d / "a.gif", foo=1),
        TypeError,
        r"unknown option\(s\) foo",
    ),  # fixed: was IndexError
    "bad-colour": (
        lambda tr, d: animate(tr, d / "a.gif", color="notacolour"),
        ValueError,
        "must be a color",
    ),  # fixed: was IndexError
}


@pytest.mark.parametrize("case", ANIMATE_ERRORS.values(), ids=ANIMATE_ERRORS.keys())
def test_animate_refuses_bad_input_clearly(case, trajectory, tmp_path):
    build, error, match = case
    with pytest.raises(error, match=match):
        build(trajectory, tmp_path)
    assert not list(tmp_path.glob("*.gif"))  # nothing half-written


@pytest.mark.parametrize(
    "measure",
    [
        Empirical(torch.full((3, 2), 1e300, dtype=F64)),  # huge: finite limits or none
        Empirical(cloud(3, 2).half()),
        Empirical(cloud(3, 2).requires_grad_(True)),
        Empirical(cloud(3, 2), positions=torch.tensor([0.0, 0.5, 1.0])),
        Gaussian(torch.zeros(2), torch.zeros(2, 2)),  # a point: a degenerate ellipse
        Gaussian(torch.zeros(3, 2), torch.eye(2).expand(3, 2, 2)),
        Grid(torch.full((4,), 0.25), -1, 1),
    ],
    ids=[
        "huge",
        "float16",
        "requires-grad",
        "positions",
        "point-gaussian",
        "batched-gaussian",
        "grid-1d",
    ],
)
def test_edge_measures_are_drawn(measure):
    artists = draw(measure)
    assert artists


def test_an_inverted_axis_is_allowed(trajectory, tmp_path):
    # matplotlib flips an axis given (max, min): a legitimate request, kept.
    path = animate(trajectory, tmp_path / "flip.gif", xlim=(1, -1))
    assert path.stat().st_size > 0
