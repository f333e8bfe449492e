"""One word per table: ``SCHEMES`` is the norm schemes' (tpde.fields.SCHEMES); the grid's
finite-volume reconstructions are ``RECONSTRUCTIONS``, and the former name still reads them
with a DeprecationWarning."""

import pytest

import tpde.flows
import tpde.flows.systems
from tpde.fields import SCHEMES


def test_the_former_name_reads_the_reconstructions_with_a_warning():
    for module in (tpde.flows, tpde.flows.systems):
        with pytest.warns(DeprecationWarning, match="now tpde.flows.RECONSTRUCTIONS"):
            assert module.SCHEMES is tpde.flows.RECONSTRUCTIONS
    assert list(tpde.flows.RECONSTRUCTIONS) == ["upwind", "muscl"]
    assert "post-ln" in SCHEMES and "SCHEMES" not in tpde.flows.__all__


def test_any_other_missing_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'SCHEME'"):
        tpde.flows.SCHEME
