"""KeOps's import-time banner stays out of tpde's output (tpde/_engines/keops.py).

keopscore prints "[KeOps] Warning : CUDA libraries not found …" to stdout on its first
import on a machine without CUDA. Each check runs in a fresh interpreter: the banner is
printed once per process, at the first import.
"""

import os
import subprocess
import sys

import pytest

BANNER = "[KeOps] Warning"
QUIET_IMPORT = "from tpde._engines.keops import import_pykeops; import_pykeops()"


def _run(code: str, **env) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "KEOPS_VERBOSE"}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
        check=True,
    )
    return done.stdout + done.stderr


def test_import_through_tpde_prints_no_banner():
    # A user's KEOPS_VERBOSE=1 wins (and shows whether this machine has a banner at all).
    if BANNER not in _run(QUIET_IMPORT, KEOPS_VERBOSE="1"):
        pytest.skip("KeOps prints no CUDA banner on this machine (CUDA found): nothing to hide.")
    out = _run(
        f"import os; {QUIET_IMPORT}; print('KEOPS_VERBOSE =', os.environ.get('KEOPS_VERBOSE'))"
    )
    assert BANNER not in out
    assert "KEOPS_VERBOSE = None" in out  # the environment is restored after the import
