"""Adversarial inputs, fifth round (issue 36): arguments at the public boundary of fields,
wrappers and the method table.

Classes: silent answers (a truthy non-bool ``own`` read as True; a method never registered
running with ``order = 0``), valid inputs refused (positions through a stack whose acting
layer uses none), errors from deep inside (``supports(None, …)``, a broadcast error for
``own=True`` at new points, ``'NoneType' object is not iterable``) and NaN carried through
(tokens changed after their measure was checked). Each case asserts a clear error (type and
message) or a result against an oracle. The counts per class (cases, failed before this
round's fixes) are in the section headers.
"""

import math

import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.fields import (
    ALiBi,
    Cosine,
    Exponential,
    GroupedQueryAttention,
    LayerSchedule,
    Masked,
    MultiHead,
    Normalized,
    RoPE,
    Softmax,
    supports,
)
from tpde.fields.base import CAPABILITIES
from tpde.flows import Method, integrate
from tpde.measures import Empirical
from tpde.metrics import w1_circle

I2, I3 = torch.eye(2, dtype=F64), torch.eye(3, dtype=F64)
D, H, HKV, DH = 4, 4, 2, 2


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _sphere(n, d=3, seed=0):
    x = _r(n, d, seed=seed)
    return x / x.norm(dim=-1, keepdim=True)


def _gqa(**options):
    args = {"heads": H, "kv_heads": HKV, "position": RoPE(), **options}
    return GroupedQueryAttention(
        _r(H * DH, D), _r(HKV * DH, D), _r(HKV * DH, D), _r(D, H * DH), **args
    )


# --------------------------- own: one normaliser (85 cases, 84 failed before: read as truthy)
NOT_A_BOOL = {
    "str-False": "False",
    "str-empty": "",
    "list-False": [False],
    "int-1": 1,
    "int-0": 0,
    "float-1": 1.0,
    "tensor-True": torch.tensor(True),
    "none-str": "None",
    "tuple": (),
    "dict": {},
    "numpy-bool": __import__("numpy").bool_(True),
    "obj": object(),
}
OWN_FIELDS = {  # (field, measure, x) of a field whose particle_velocity takes own=
    "softmax": lambda: (Softmax(I3, I3, I3, scale=1.0), Empirical(_sphere(6)), _sphere(6)),
    "exponential": lambda: (Exponential(I3, I3, I3, scale=1.0), Empirical(_sphere(6)), _sphere(6)),
    "normalized": lambda: (
        Normalized(Softmax(I3, I3, I3), "post-ln"),
        Empirical(_sphere(6)),
        _sphere(6),
    ),
    "multihead": lambda: (MultiHead([Softmax(I3, I3, I3)] * 2), Empirical(_sphere(6)), _sphere(6)),
    "sum": lambda: (Softmax(I3, I3, I3) + Cosine(I3, I3, I3), Empirical(_sphere(6)), _sphere(6)),
    "schedule": lambda: (
        LayerSchedule([Softmax(I3, I3, I3)] * 2),
        Empirical(_sphere(6)),
        _sphere(6),
    ),
    "masked": lambda: (
        Masked(Softmax(I3, I3, I3)),
        Empirical(_sphere(6), positions=torch.arange(6.0)),
        _sphere(6),
    ),
}


@pytest.mark.parametrize("value", NOT_A_BOOL.values(), ids=NOT_A_BOOL.keys())
@pytest.mark.parametrize("name", OWN_FIELDS)
def test_own_that_is_not_a_bool_is_refused(name, value):
    # fixed: "False" and [False] were truthy, read as True (on the harmonics engine the
    # velocity of x attending to itself, 0.18 off Γ[μ](x)); 0 and 1 read as bools.
    field, mu, x = OWN_FIELDS[name]()
    with pytest.raises(TypeError, match=r"own says whether the points x are μ's own tokens"):
        field.particle_velocity(0.0, mu, x, "auto", own=value)


def test_own_false_on_the_harmonics_engine_is_the_velocity_at_new_points():
    # The case: 3000 tokens (the harmonics engine wins), own=False at μ's tokens' values
    # gives the dense velocity at new points; own=True the same field at μ's own tokens.
    x = _sphere(3000, seed=1)
    mu, field = Empirical(x), Softmax(I3, I3, I3, scale=1.0)
    new = field.particle_velocity(0.0, mu, x.clone(), "auto", own=False)
    own = field.particle_velocity(0.0, mu, x, "auto", own=True)
    dense = field.particle_velocity(0.0, mu, x, "dense", own=True)
    torch.testing.assert_close(new, dense, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(own, dense, rtol=1e-12, atol=1e-12)


# ----------------------- own=True at points that are not μ's tokens (6 cases, 6 failed before)
OWN_COUNT = {
    f"{name}-{m}-for-6": (
        lambda build=build, m=m: build().particle_velocity(
            0.0,
            Empirical(_r(6, D), positions=torch.arange(6.0)),
            _r(m, D, seed=2),
            "auto",
            own=True,
        ),
        ValueError,
        rf"own=True says that x are μ's tokens, but x has {m} points and μ has 6 tokens",
    )
    for name, build in (
        ("gqa", _gqa),
        ("gqa-alibi", lambda: _gqa(position=ALiBi())),
        (
            "masked",
            lambda: Masked(
                Softmax(torch.eye(D, dtype=F64), torch.eye(D, dtype=F64), torch.eye(D, dtype=F64))
            ),
        ),
    )
    for m in (4, 9)
}
# fixed: GQA at 4 new points for 6 tokens leaked "The size of tensor a (4) must match …"
test_own_true_needs_mus_token_count = error_table_test(OWN_COUNT)


# ---------- positions through a stack whose acting layer uses none (15 cases, 8 failed before)
def _stack():
    eye = torch.eye(D, dtype=F64)
    return LayerSchedule([Softmax(eye, eye, eye), _gqa()])


@pytest.mark.parametrize("t", [0.0, 0.5, 0.99, 1.0, 1.5, 1.99])
@pytest.mark.parametrize("m", [4, 7])
def test_a_stack_takes_positions_at_every_depth(t, m):
    # fixed: LayerSchedule([softmax, gqa]).velocity(mu, x, positions=p, t=0.5) was refused with
    # "this field uses none" (the softmax layer acts at t < 1; the stack uses positions).
    mu = Empirical(_r(6, D), positions=torch.arange(6.0))
    x, p = _r(m, D, seed=3), torch.arange(float(m))
    stack = _stack()
    got = stack.velocity(mu, x, positions=p, t=t)
    layer = stack.piece(t)
    want = layer.velocity(mu, x, positions=p) if layer.needs_positions else layer.velocity(mu, x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


STACK_ERRORS = {
    "positions-wrong-length": (
        lambda: _stack().velocity(
            Empirical(_r(6, D), positions=torch.arange(6.0)),
            _r(4, D),
            positions=torch.arange(3.0),
            t=0.5,
        ),
        ValueError,
        r"positions must have shape \(4,\) to match x",
    ),
    "positions-without-x": (
        lambda: _stack().velocity(
            Empirical(_r(6, D), positions=torch.arange(6.0)), positions=torch.arange(6.0), t=0.5
        ),
        ValueError,
        "positions are the positions of the evaluation points x",
    ),
    "positions-nan": (
        lambda: _stack().velocity(
            Empirical(_r(6, D), positions=torch.arange(6.0)),
            _r(4, D),
            positions=torch.tensor([0.0, 1.0, math.nan, 2.0]),
            t=0.5,
        ),
        ValueError,
        "positions",
    ),
}
test_stack_positions_are_still_checked = error_table_test(STACK_ERRORS)


# ------------------ the method table: traits checked where resolved (20 cases, 19 failed before)
def _method(**traits):
    def step(self, f, t, y, h, k1=None, h_clock=0.0):
        return tuple(part + h * d for part, d in zip(y, f(t, y), strict=True)), None, None

    return type("Custom", (Method,), {"step": step, **traits})()


def _run(method):
    return integrate(Softmax(I2, I2, I2), Empirical(_r(4, 2)), 0.1, dt=0.05, method=method)


TRAITS_OK = {"name": "custom", "order": 1, "adaptive": False}
METHOD_ERRORS = {
    "bare-method": (  # fixed: NotImplementedError "Method must implement step"
        lambda: _run(Method()),
        TypeError,
        r"lacks the traits 'name', 'order', 'adaptive', 'step' that the stepping loop needs",
    ),
    **{
        f"missing-{trait}": (
            lambda trait=trait: _run(_method(**{k: v for k, v in TRAITS_OK.items() if k != trait})),
            TypeError,
            rf"lacks the trait '{trait}' that the stepping loop needs",
        )
        for trait in TRAITS_OK
    },
    **{
        f"{trait}-{label}": (
            lambda trait=trait, value=value: _run(_method(**{**TRAITS_OK, trait: value})),
            TypeError,
            rf"must declare the trait '{trait}' as",
        )
        for trait, label, value in (
            ("order", "0", 0),  # fixed: ran
            ("order", "-1", -1),  # fixed: ran
            ("order", "float", 1.0),  # fixed: ran
            ("order", "bool", True),  # fixed: ran
            ("order", "str", "1"),  # fixed: ran
            ("adaptive", "str-no", "no"),  # fixed: 'NoneType' object is not iterable
            ("adaptive", "int", 0),  # fixed: ran
            ("adaptive", "none", None),
            ("name", "empty", ""),  # fixed: ran
            ("name", "int", 3),  # fixed: ran
            ("uses_k1", "str", "yes"),  # fixed: ran
            ("error_exponent", "zero", 0.0),  # fixed: ran
            ("error_exponent", "nan", math.nan),  # fixed: ran
            ("ssp", "int", 1),  # fixed: ran
        )
    },
    "two-wrong": (  # every trait at fault is named
        lambda: _run(_method(**{**TRAITS_OK, "order": 0, "adaptive": "no"})),
        TypeError,
        r"the traits 'order' as .*received 0; 'adaptive' as .*received 'no'",
    ),
}
test_method_traits_are_checked_where_resolved = error_table_test(METHOD_ERRORS)


def test_a_valid_unregistered_method_runs():
    run = _run(_method(**TRAITS_OK))
    assert str(run.status) == "completed"


# ------------------------------- supports(field, name): (28 cases, 24 failed before)
NOT_A_FIELD = {
    "None": None,
    "int": 3,
    "str": "softmax",
    "tensor": I2,
    "class": Softmax,
    "measure": Empirical(_r(3, 2)),
    "list": [Softmax(I2, I2, I2)],
    "dict": {},
}


@pytest.mark.parametrize("capability", ["gaussian", "projection", "softmax_form"])
@pytest.mark.parametrize("value", NOT_A_FIELD.values(), ids=NOT_A_FIELD.keys())
def test_supports_asks_a_field(value, capability):
    # fixed: supports(None, "gaussian") raised AttributeError ('NoneType' … 'capabilities').
    with pytest.raises(TypeError, match=r"supports\(field, capability\) asks a tpde field"):
        supports(value, capability)


@pytest.mark.parametrize("capability", [None, 3, "gauss", ""], ids=str)
def test_supports_names_the_known_capabilities(capability):
    with pytest.raises(ValueError, match="unknown capability .*known: " + next(iter(CAPABILITIES))):
        supports(Softmax(I2, I2, I2), capability)


# ------------------------- NaN carried through: tokens changed after the check (32 cases,
# ------------------------- 32 failed before: reported as score overflow, or a NaN blow_up)
def _poisoned(n=6, d=3, value=math.nan, where=(0, 0), sphere=True):
    mu = Empirical(_sphere(n, d) if sphere else _r(n, d))
    mu.points[where] = value  # changed in place after the measure was checked
    return mu


NAN_FIELDS = {
    "softmax": lambda: Softmax(I3, I3, I3),
    "softmax-harmonics": lambda: Softmax(I3, I3, I3, scale=1.0),
    "normalized": lambda: Normalized(Softmax(I3, I3, I3), "post-ln"),
    "exponential": lambda: Exponential(I3, I3, I3),
}
POISON = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "nan-late": math.nan}


@pytest.mark.parametrize("poison", POISON, ids=POISON.keys())
@pytest.mark.parametrize("name", NAN_FIELDS)
def test_a_nan_token_is_named_by_velocity(name, poison):
    where = (5, 2) if poison == "nan-late" else (0, 0)
    engine = "harmonics" if name == "softmax-harmonics" else "auto"
    mu = _poisoned(n=3000 if engine == "harmonics" else 6, value=POISON[poison], where=where)
    with pytest.raises(ValueError, match=rf"mu's points has 1 non-finite value.*{where}"):
        NAN_FIELDS[name]().velocity(mu, engine=engine)


@pytest.mark.parametrize("poison", POISON, ids=POISON.keys())
@pytest.mark.parametrize("name", NAN_FIELDS)
def test_a_nan_token_is_named_by_integrate(name, poison):
    # fixed: integrate(Normalized(sa()), S.with_points(NaN)) returned the NaN state as blow_up.
    where = (5, 2) if poison == "nan-late" else (0, 0)
    base = Empirical(_sphere(6))
    points = base.points.clone()
    points[where] = POISON[poison]
    with pytest.raises(ValueError, match=rf"mu's points has 1 non-finite value.*{where}"):
        integrate(NAN_FIELDS[name](), base.with_points(points), 0.1)


# ------------------------------ w1_circle of tokens holding NaN (10 cases, 10 failed before)
def _circle(n, seed=0):
    angles = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=F64) * 6.28
    return torch.stack([angles.cos(), angles.sin()], -1)


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("side", ["mu", "nu"])
def test_w1_circle_refuses_a_non_finite_token(poison, side):
    # fixed: NaN passed the on-circle check (worst > tolerance is False for NaN): W1 = nan.
    bad, good = Empirical(_circle(5)), Empirical(_circle(4, seed=1))
    bad.points[2, 0] = poison
    args = (bad, good) if side == "mu" else (good, bad)
    with pytest.raises(ValueError, match=r"w1_circle's (mu|nu)'s points has 1 non-finite value"):
        w1_circle(*args)


@pytest.mark.parametrize("poison", [math.nan, math.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("index", [0, 3])
def test_w1_circle_refuses_a_non_finite_weight(poison, index):
    mu = Empirical(_circle(5))
    mu.weights[index] = poison
    with pytest.raises(ValueError, match=r"w1_circle's mu's weights has 1 non-finite value"):
        w1_circle(mu, Empirical(_circle(3, seed=2)))


# ------- NaN carried through other measures: a Gaussian, a grid, a circle density changed in
# ------- place (12 cases, 12 failed before: "blow_up" at t0, a NaN velocity, a NaN W1)
def _gaussian_poisoned(part):
    from tpde.measures import Gaussian

    g = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
    (g.mean() if part == "mean" else g.cov())[(0,) if part == "mean" else (0, 1)] = math.nan
    return g


def _grid_poisoned():
    from tpde.measures import Grid

    grid = Grid(torch.full((8, 8), 1 / 64, dtype=F64), -1.0, 1.0)
    grid.density[2, 3] = math.inf
    return grid


def _circle_poisoned():
    from tpde.measures import CircleDensity

    theta = torch.arange(64, dtype=F64) * (2 * math.pi / 64)
    rho = CircleDensity(1 + 0.3 * torch.cos(theta))
    rho.density[5] = math.nan
    return rho


SA2 = Softmax(I2, I2, I2)
NAN_MEASURES = {
    "gaussian-mean-integrate": (
        lambda: integrate(SA2, _gaussian_poisoned("mean"), 0.1),
        r"mu's mean has 1 non-finite value",
    ),
    "gaussian-cov-integrate": (
        lambda: integrate(SA2, _gaussian_poisoned("cov"), 0.1),
        r"mu's cov has 1 non-finite value",
    ),
    "gaussian-mean-velocity": (
        lambda: SA2.velocity(_gaussian_poisoned("mean"), _r(3, 2)),
        r"mu's mean has 1 non-finite value",
    ),
    "gaussian-cov-velocity": (
        lambda: SA2.velocity(_gaussian_poisoned("cov"), _r(3, 2)),
        r"mu's cov has 1 non-finite value",
    ),
    "gaussian-rodas4": (
        lambda: integrate(SA2, _gaussian_poisoned("cov"), 0.1, method="rodas4"),
        r"mu's cov has 1 non-finite value",
    ),
    "grid-integrate": (
        lambda: integrate(SA2, _grid_poisoned(), 0.1),
        r"mu's density has 1 non-finite value.*\(2, 3\)",
    ),
    "grid-velocity": (
        lambda: SA2.velocity(_grid_poisoned()),
        r"mu's density has 1 non-finite value",
    ),
    "circle-integrate": (
        lambda: integrate(Normalized(SA2, "post-ln"), _circle_poisoned(), 0.1),
        r"rho's density has 1 non-finite value.*\(5,\)",
    ),
    "circle-integrate-usa": (
        lambda: integrate(Normalized(Exponential(I2, I2, I2), "post-ln"), _circle_poisoned(), 0.1),
        r"rho's density has 1 non-finite value",
    ),
    "circle-w1-mu": (
        lambda: w1_circle(_circle_poisoned(), Empirical(_circle(3))),
        r"w1_circle's mu's density has 1 non-finite value",
    ),
    "circle-w1-nu": (
        lambda: w1_circle(Empirical(_circle(3)), _circle_poisoned()),
        r"w1_circle's nu's density has 1 non-finite value",
    ),
    "circle-w1-both": (
        lambda: w1_circle(_circle_poisoned(), _circle_poisoned()),
        r"w1_circle's mu's density has 1 non-finite value",
    ),
}


@pytest.mark.parametrize("case", NAN_MEASURES.values(), ids=NAN_MEASURES.keys())
def test_a_measure_changed_in_place_is_named(case):
    build, match = case
    with pytest.raises(ValueError, match=match):
        build()


# ---- positions through wrappers and stacks at every depth (24 cases, 9 failed before: a
# ---- stack whose piece is Masked leaked "Masked.velocity() got an unexpected keyword 'info'")
def _eye():
    return torch.eye(D, dtype=F64)


def _sm():
    return Softmax(_eye(), _eye(), _eye())


WRAPPERS = {
    "sum": lambda: _sm() + _gqa(),
    "multihead-masked": lambda: MultiHead([_sm(), Masked(_sm())]),
    "nested-stack": lambda: LayerSchedule([LayerSchedule([_sm(), _sm()]), _gqa()]),
    "normalized-stack": lambda: Normalized(LayerSchedule([_sm(), _gqa()]), "pre-ln"),
    "stack-of-normalized": lambda: LayerSchedule(
        [Normalized(_sm(), "pre-ln"), Normalized(_gqa(), "pre-ln")]
    ),
    "stack-of-sums": lambda: LayerSchedule([_sm() + _sm(), _gqa() + _sm()]),
    "stack-then-masked": lambda: LayerSchedule([_sm(), Masked(_sm())]),
    "parallel": lambda: __import__("tpde.fields", fromlist=["Parallel"]).Parallel([_sm(), _gqa()]),
}


@pytest.mark.parametrize("t", [0.0, 0.5, 1.5])
@pytest.mark.parametrize("name", WRAPPERS)
def test_positions_reach_the_parts_that_use_them(name, t):
    # Oracle: the piece acting at t, evaluated at x with the positions where it uses them.
    mu = Empirical(_r(6, D), positions=torch.arange(6.0))
    x, p = _r(4, D, seed=4), torch.arange(4.0)
    field = WRAPPERS[name]()
    got = field.velocity(mu, x, positions=p, t=t)
    piece = field.piece(t)
    want = piece.velocity(mu, x, positions=p, t=t) if piece.needs_positions else None
    if want is None:
        want = piece.velocity(mu, x, t=t)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
