"""One vocabulary per kind of name: the norm schemes (tpde.fields.SCHEMES), the kernels'
normalisers (tpde.fields.KERNELS) and the attention variants (tpde.fields.registry.VARIANTS)
are each defined once, in the library; tpde.theory, the experiments and the benchmarks read
them (a rule of the architecture enforced by a test, as tests/test_package_boundaries.py)."""

import re
from pathlib import Path

from tpde.experiments.common.paper import PAPER_VARIANTS
from tpde.experiments.meanfield import MEANFIELD_VARIANTS
from tpde.experiments.sphere.config import SPHERE_SCHEMES
from tpde.fields import KERNELS, SCHEMES, Exponential, Softmax, registry
from tpde.theory import SCHEMES_WITH_LAW

ROOT = Path(__file__).resolve().parents[1]
HOMES = {
    "SCHEMES": "tpde/fields/norms/schemes.py",
    "KERNELS": "tpde/fields/attention/kernels.py",
    "VARIANTS": "tpde/fields/registry.py",
}


def _sources():
    for folder in ("tpde", "experiments", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_each_table_is_defined_once_in_its_home():
    definition = re.compile(r"^(SCHEMES|KERNELS|VARIANTS)\b\s*(:[^=\n]*)?=", re.MULTILINE)
    found = sorted(
        (match.group(1), path) for path, text in _sources() for match in definition.finditer(text)
    )
    assert found == sorted((name, path) for name, path in HOMES.items())


def test_no_table_of_scheme_or_kernel_names_is_written_out():
    """A module-level list of names is read from the tables, never spelt again (a table
    keyed by the names, a study's predictions per scheme, and a test of membership inside
    a formula, ``scheme in ("post-ln", "pre-ln")``, use the vocabulary: they are no list)."""
    names = r'"(post-ln|pre-ln|peri-ln|mix-ln|ngpt|layernorm|rmsnorm|sandwich|sa|usa)"'
    table = re.compile(rf"^\w+\s*(:[^=\n]*)?=\s*[\(\[]\s*{names}", re.MULTILINE)
    default = re.compile(rf"^\s+\w+\s*:[^=\n]*=\s*\(\s*{names},", re.MULTILINE)
    found = [path for path, text in _sources() if table.search(text) or default.search(text)]
    assert found == []


def test_the_views_of_the_tables_keep_their_names_and_order():
    """The theory's schemes with a law and the studies' selections, as they were spelt
    (the quick runs' summary lines name them in this order)."""
    assert SCHEMES_WITH_LAW == ("post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt")
    assert all(SCHEMES[name].equiangular_law for name in SCHEMES_WITH_LAW)
    assert SPHERE_SCHEMES == ("post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt", "layernorm")
    assert KERNELS == {"sa": Softmax, "usa": Exponential}
    assert set(MEANFIELD_VARIANTS) <= set(registry.VARIANTS)
    assert PAPER_VARIANTS == ("softmax", "l2", "multihead", "sinkhorn")
