"""Build the documentation site: ``python docs/build.py [--out DIR] [--size full|small]``.

``make docs`` runs this script; the site lands in ``build/docs/`` (open
``build/docs/index.html``). The sources are staged first: ``docs/`` and ``examples/`` are
copied into a work folder (default ``build/docs-work/``), where sphinx-gallery writes the
generated gallery pages and runs each example in the example's own folder, so a build never
writes into the checkout. Executed examples are cached there by content: a rebuild reruns
only the examples that changed.

``--size small`` runs the examples at the size of the test suite (``TPDE_EXAMPLE_SIZE=small``,
read by every example); ``tests/docs`` builds the site that way into a temporary folder.

The build is offline: no intersphinx inventory is fetched, and MathJax is copied from the
``django-static-mathjax`` wheel of the ``docs`` extra into the site (docs/conf.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What sphinx-gallery writes into the staged sources (kept between builds: its cache).
GENERATED = ("gallery", "sg_execution_times.rst")
SIZES = ("full", "small")


def stage(work: Path) -> Path:
    """Copy docs/ and examples/ into ``work/src`` (generated gallery pages are kept)."""
    src = work / "src"
    src.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name in GENERATED:
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build.py", "*.gif")
    # copy2 keeps modification times, so Sphinx rereads only the pages that changed.
    shutil.copytree(ROOT / "docs", src, dirs_exist_ok=True, ignore=ignore)
    shutil.copytree(ROOT / "examples", src / "examples", ignore=ignore)
    return src


def build(
    out: Path,
    work: Path,
    size: str = "full",
    *,
    keep_going: bool = False,
    capture: bool = False,
    execute: bool = True,
) -> subprocess.CompletedProcess:
    """Stage the sources and run ``sphinx-build -b html -W`` (warnings are errors).

    ``keep_going``: on an error, still write every page (the tests then report each
    problem); ``capture``: return the build's output instead of printing it;
    ``execute=False``: the gallery's pages show each example's code without running it
    (sphinx-gallery's ``plot_gallery=0``): the default test suite checks the pages that way
    and runs each example as its own test (tests/docs).
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}; received {size!r}.")
    out, work = Path(out).resolve(), Path(work).resolve()
    src = stage(work)
    env = dict(os.environ, TPDE_EXAMPLE_SIZE=size)
    # Examples are small torch computations: one thread each (DESIGN.md, "Engines and scale").
    env.setdefault("OMP_NUM_THREADS", "1")
    # KeOps's "CUDA libraries not found" banner, printed when POT or GeomLoss import it
    # (tpde's own KeOps imports are quiet: tpde/_engines/keops.py), is no example's output.
    env.setdefault("KEOPS_VERBOSE", "0")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q"]
    if keep_going:
        command.append("--keep-going")
    if not execute:
        command += ["-D", "plot_gallery=0"]
    command += ["-d", str(work / "doctrees"), str(src), str(out)]
    return subprocess.run(
        command,
        env=env,
        cwd=work,
        capture_output=capture,
        text=True,
        check=False,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "docs", help="HTML folder")
    parser.add_argument(
        "--work", type=Path, default=None, help="staged sources and caches (build/docs-work)"
    )
    parser.add_argument("--size", choices=SIZES, default="full", help="example size")
    args = parser.parse_args(argv)
    work = args.work or ROOT / "build" / ("docs-work" if args.size == "full" else "docs-work-small")
    done = build(args.out, work, args.size)
    if done.returncode == 0:
        print(f"site: {args.out.resolve() / 'index.html'}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
