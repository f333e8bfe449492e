"""tpde.plot: draw one measure, animate a flow into a GIF."""

import subprocess
import sys

import matplotlib
import pytest
import torch
from PIL import Image

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid
from tpde.plot import animate, draw

matplotlib.use("Agg")
import matplotlib.pyplot as plt

F64 = torch.float64
G0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def gif_frames(path) -> int:
    with Image.open(path) as image:
        assert image.format == "GIF"
        return image.n_frames


def clouds(generator, count=4):
    return [Empirical((1 + k) * torch.randn(30, 3, generator=generator)) for k in range(count)]


def test_animate_particles_writes_one_frame_per_saved_measure(tmp_path, generator):
    field = Softmax.from_interaction(-torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    cloud = Empirical.from_gaussian(G0, 40, generator=generator)
    trajectory = integrate(field, cloud, 0.5, dt=0.1, save=6, method="rk4")
    path = animate(trajectory, tmp_path / "flow.gif", title="softmax")
    assert path == tmp_path / "flow.gif"
    assert gif_frames(path) == len(trajectory) == 6


def test_animate_batched_gaussians_and_a_plain_list(tmp_path):
    batch = Gaussian(torch.zeros(3, 2), torch.eye(2) * torch.tensor([0.5, 1.0, 2.0])[:, None, None])
    frames = [batch, batch, batch]
    assert gif_frames(animate(frames, tmp_path / "g.gif", times=[0, 1, 2])) == 3


def test_animate_grids_in_two_and_one_dimensions(tmp_path):
    grid2 = Grid.from_gaussian(G0, (12, 10), -6.0, 6.0)
    assert gif_frames(animate([grid2, grid2], tmp_path / "grid2.gif")) == 2
    g1 = Gaussian(torch.zeros(1, dtype=F64), torch.ones(1, 1, dtype=F64))
    grid1 = Grid.from_gaussian(g1, (16,), -6.0, 6.0)
    assert gif_frames(animate([grid1, grid1, grid1], tmp_path / "grid1.gif")) == 3


def test_animate_shows_chosen_coordinates_of_a_cloud(tmp_path, generator):
    path = animate(clouds(generator), tmp_path / "c.GIF", dims=(2, 0), fps=2)
    assert gif_frames(path) == 4


def test_draw_returns_the_artists_of_each_kind(ax, generator):
    assert len(draw(Empirical(torch.randn(20, 2, generator=generator)), ax)) == 1
    batch = Gaussian(torch.zeros(3, 2), torch.eye(2).expand(3, 2, 2))
    assert len(draw(batch, ax, color="C3", label="three")) == 6  # an ellipse and a dot each
    assert len(draw(Grid.from_gaussian(G0, (8, 8), -6.0, 6.0), ax)) == 1


def test_draw_gaussian_ellipse_is_the_k_sigma_level_set(ax):
    g = Gaussian(torch.tensor([1.0, -1.0]), torch.tensor([[4.0, 0.0], [0.0, 1.0]]))
    line, _ = draw(g, ax, sigmas=2.0)
    x, y = line.get_data()
    assert torch.allclose(
        torch.as_tensor((x - 1) ** 2 / 4 + (y + 1) ** 2), torch.tensor(4.0, dtype=F64)
    )


def test_draw_uses_pyplot_current_axes_by_default(generator):
    fig = plt.figure()
    try:
        (art,) = draw(Empirical(torch.randn(5, 2, generator=generator)))
        assert art.axes is fig.gca()
    finally:
        plt.close(fig)


def test_animate_rejects_bad_input(tmp_path, generator):
    cloud = Empirical(torch.randn(10, 2, generator=generator))
    with pytest.raises(ValueError, match=r"path must end in '\.gif'"):
        animate([cloud], tmp_path / "flow.mp4")
    with pytest.raises(ValueError, match="holds no measure"):
        animate([], tmp_path / "flow.gif")
    with pytest.raises(TypeError, match="same kind of measure; received Empirical, Gaussian"):
        animate([cloud, G0], tmp_path / "flow.gif")
    with pytest.raises(ValueError, match="times has 3 entries for 1 measures"):
        animate([cloud], tmp_path / "flow.gif", times=[0, 1, 2])
    with pytest.raises(ValueError, match="fps must be > 0"):
        animate([cloud], tmp_path / "flow.gif", fps=0)
    with pytest.raises(TypeError, match="received Tensor"):
        animate([cloud.points], tmp_path / "flow.gif")
    assert not list(tmp_path.iterdir())


def test_draw_rejects_bad_input(ax, generator):
    line = Empirical(torch.randn(10, 1, generator=generator))
    with pytest.raises(ValueError, match=r"this measure has d = 1\. Put a 1-D density on a Grid"):
        draw(line, ax)
    cloud = Empirical(torch.randn(10, 3, generator=generator))
    with pytest.raises(ValueError, match=r"dims must be two coordinate indices in \[0, 2\]"):
        draw(cloud, ax, dims=(0, 3))
    with pytest.raises(ValueError, match="two different coordinates"):
        draw(cloud, ax, dims=(1, 1))
    with pytest.raises(ValueError, match="sigmas must be > 0"):
        draw(G0, ax, sigmas=0)
    with pytest.raises(TypeError, match="can only draw an Empirical, a Gaussian or a Grid"):
        draw(cloud.points, ax)


def test_import_tpde_does_not_load_matplotlib():
    code = "import sys, tpde, tpde.plot; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
