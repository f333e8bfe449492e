"""The field protocol: what every attention field implements, and what flows may use.

A field Γ maps a measure μ to a velocity field Γ[μ]: R^d → R^d. The Transformer PDE is
∂t μ + div(μ Γ[μ]) = 0. One field object drives particles, Gaussian moment ODEs (where
Gaussians stay Gaussian) and grid densities; the flows (:mod:`tpde.flows`) use only the
public names of :class:`Field` below.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from tpde._engines import check_engine
from tpde._validation import (
    ValuesCheckedOnce,
    as_tensor,
    check_finite,
    check_measure_finite,
    check_real,
    finite_sum,
)
from tpde.fields.calls import InnerSolves, _positions_user, part_velocity, query_positions
from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = [
    "CAPABILITIES",
    "AffineDerivative",
    "Field",
    "GaussianNotPreserved",
    "InnerSolves",
    "implemented_capabilities",
    "shared_capabilities",
    "supports",
]


def addition(cls: type) -> type:
    """Class decorator: ``cls([a, b])`` is the field ``a + b`` of any two fields."""
    Field._addition = cls
    return cls


def check_velocity_type(value, field) -> None:
    """Raise TypeError unless a field's ``particle_velocity`` returned a torch tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{type(field).__name__}.particle_velocity returned {type(value).__name__}; a tpde "
            "field must return a torch tensor of the points' shape (..., m, d), computed in "
            "torch from mu.points and x (convert with torch.as_tensor)."
        )


def check_no_overflow(value: torch.Tensor, mu, what: str, field=None) -> None:
    """Raise when a computation on finite tokens produced Inf or NaN, naming the cause.

    The tokens are finite (checked when the measure was built). A field of tpde computes
    with stabilised sums, so a non-finite result is an overflow of the dtype (attention
    scores xᵀAy beyond its range): OverflowError. A field defined outside tpde (``field``
    given) produced the values itself: FloatingPointError naming the field. The sum is
    checked first (Inf and NaN propagate into it; 15× cheaper than an elementwise check at
    10⁵ entries), the entries only when the sum is not finite.
    """
    if finite_sum(value) or bool(torch.isfinite(value).all()):
        return
    check_measure_finite(mu)  # non-finite tokens first: not an overflow
    bad = ~torch.isfinite(value.detach())
    nan = bool(torch.isnan(value.detach()).any())
    foreign = _foreign_fields(field) if field is not None else []
    if foreign:
        inside = "" if foreign[0] is field else f" (inside {type(field).__name__})"
        names = " inside ".join(dict.fromkeys(type(f).__name__ for f in reversed(foreign)))
        raise FloatingPointError(
            f"{names}{inside} returned {int(bad.sum())} non-finite entries "
            f"({'NaN' if nan else 'Inf'}) in {what} for finite tokens: the field's own "
            "particle_velocity produced them (a field defined outside tpde; look for 0/0 at "
            "a point, a log of 0, or an exp that overflows)."
        )
    largest = float(mu.points.detach().abs().max())
    source = getattr(field, "overflow_source", "the attention scores")
    raise OverflowError(
        f"{what} overflowed in {value.dtype}: {source} of these tokens (largest "
        f"|coordinate| {largest:.3g}) exceed the range of {value.dtype}. Compute in float64 "
        "(mu.to(dtype=torch.float64) and float64 parameters), or rescale the tokens or the "
        f"parameters (A = scale·KᵀQ in attention) so that {source} stay moderate."
    )


def _foreign_fields(field) -> list:
    """The fields defined outside tpde on the chain of single children from ``field``
    (:meth:`Field.children`: itself, the field a normalised or masked field wraps, a user's
    wrapper and the field it declares): the likely source of a non-finite velocity, which
    tpde's own stabilised sums do not produce. A field of several children stops the chain:
    which child produced the values is unknown there, so a :class:`~tpde.fields.Sum` checks
    its parts itself, before it adds them (an overflow of a tpde part is not blamed on the
    others)."""
    foreign = [] if type(field).__module__.startswith("tpde.") else [field]
    children = field.children() if isinstance(field, Field) else ()
    return foreign + _foreign_fields(children[0]) if len(children) == 1 else foreign


_MISSING = object()


def _acts_on(field) -> str:
    """Where a field's dimension d comes from, for messages: the weight that fixes it (named
    weights of the feed-forward and grouped-query fields), Q/K/V, or the field itself."""
    params = getattr(field, "params", None)
    source = getattr(params, "_source", {}).get("d")
    if source is not None:
        name, shape = source
        return f"the {type(field).__name__} acts on d = {field.dim} ({name} has shape {shape})"
    if hasattr(params, "k") and hasattr(params, "scale"):  # Q, K, V parameters
        return f"the field's parameters act on d = {field.dim} (Q, K: (k, d), V: (d, d))"
    return f"the {type(field).__name__} acts on d = {field.dim}"


def check_velocity_shape(value: torch.Tensor, x: torch.Tensor, who: str) -> None:
    """Raise ValueError unless a velocity has the points' shape (m, d) in its trailing
    dimensions, with leading batch dimensions that broadcast against the points' (a
    narrower velocity would broadcast into wrong numbers when added or stepped)."""
    if value.shape == x.shape:  # the usual case: nothing to check
        return
    ok = value.ndim >= 2 and value.shape[-2:] == x.shape[-2:]
    if ok:
        try:
            torch.broadcast_shapes(value.shape[:-2], x.shape[:-2])
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"{who} returned shape {tuple(value.shape)} for points of shape "
            f"{tuple(x.shape)}; a velocity has the points' shape (..., m, d), one vector of "
            "R^d per point."
        )


class GaussianNotPreserved(NotImplementedError):
    """The field does not map Gaussians to Gaussians; there is no moment closure."""


#: Optional capabilities, and the methods whose implementation confers each one. A field
#: has a capability when its class implements every method named here (not the default of
#: :class:`Field`); composites (Normalized, Masked, MultiHead, LayerSchedule, Sum, a user's
#: wrapper) derive theirs from their children (:meth:`Field.children`). Nothing is
#: declared, so nothing can over-claim.
CAPABILITIES = {
    # Γ[N(α, Σ)] is affine: gaussian_affine(t, mean, cov) -> (c, B); moment ODEs exist.
    "gaussian": ("gaussian_affine",),
    # (c, B) with their derivative in (α, Σ) in closed form (AffineDerivative): the stiff
    # methods' Jacobian without autograd (:meth:`tpde.flows.GaussianSystem.jacobian`).
    "gaussian_derivative": ("gaussian_affine", "gaussian_affine_derivative"),
    # Γ is one key-biased softmax average: every softmax engine, Masked, the engine table.
    "softmax_form": ("softmax_form",),
    # Γ = Σ_j w_j e^{⟨q(x), k_j⟩} v_j, an unnormalised exponential kernel sum: Masked.
    "kernel_form": ("kernel_form",),
    # Γ = −(sM)∇(δG/δμ)/ω_μ (MATH.md §5): energies, JKO steps, the twisted metric.
    "gradient_flow": (
        "interaction",
        "energy",
        "first_variation",
        "first_variation_grad",
        "log_metric_weight",
    ),
    # Tokens on a manifold (the sphere): ``project(points)`` retracts after every step.
    "projection": ("project",),
}


@functools.cache
def implemented_capabilities(cls: type) -> frozenset:
    """The capabilities whose methods ``cls`` implements (overrides of :class:`Field`'s)."""
    return frozenset(
        name
        for name, methods in CAPABILITIES.items()
        if all(getattr(cls, m, None) not in (None, getattr(Field, m, None)) for m in methods)
    )


def shared_capabilities(parts, own: frozenset = frozenset({"gaussian"})) -> frozenset:
    """The capabilities of ``own`` that every field of ``parts`` has (a wrapper's rule: a
    sum or a stack keeps Gaussians Gaussian only if every part does)."""
    return frozenset(c for c in own if all(c in part.capabilities for part in parts))


def supports(field, capability: str) -> bool:
    """Whether ``field`` has ``capability`` (a name of :data:`CAPABILITIES`).

    The one question every consumer asks (flows, Masked, JKO, the engine tests). A plain
    field's capabilities follow from the methods its class implements; a wrapper's from
    its parts (its ``capabilities`` property).
    """
    if not isinstance(capability, str) or capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; known: {', '.join(CAPABILITIES)}.")
    capabilities = getattr(field, "capabilities", None)  # a wrapper's: derived at each ask
    if not isinstance(capabilities, frozenset | set):
        raise TypeError(
            f"supports(field, capability) asks a tpde field (a tpde.fields.Field); received "
            f"{type(field).__name__} as the field."
        )
    return capability in capabilities


@dataclass(frozen=True)
class AffineDerivative:
    r"""The Gaussian closure Γ[N(α, Σ)](x) = c + Bx and its derivative in (α, Σ).

    For a perturbation (dα, dΣ), dΣ symmetric,

        dc = C dα + Σ_h P_h dΣ r_h,        dB = Σ_h P_h dΣ R_h,

    B does not depend on α (true of softmax, L2 and multi-head attention: their covariance
    equations do not involve the mean, MATH.md §3). What the capability
    ``"gaussian_derivative"`` returns, and what the stiff methods' Jacobian of the moment
    ODE α̇ = c + Bα, Σ̇ = BΣ + ΣBᵀ is assembled from
    (:meth:`tpde.flows.GaussianSystem.jacobian`).

    Attributes
    ----------
    c : (..., d);  B : (..., d, d);  C : (..., d, d);
    terms : tuple of (P_h (..., d, d), R_h (..., d, d), r_h (..., d) or None).
    """

    c: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    terms: tuple


class Field:
    """Base class of attention fields: the public protocol flows rely on.

    Notes
    -----
    Required of every field:

    - ``dim``: int, the token dimension d;
    - ``particle_velocity(t, mu, x, engine, info=None)``: Γ[μ](x) for an Empirical μ at
      points x (m, d) (or (…, m, d) for batched parameters), on a checked engine name;
      inner solves report into ``info`` (an :class:`InnerSolves`, or None);
    - optionally the keyword ``own`` (``particle_velocity(..., *, own=None)``): whether the
      queries are the keys, i.e. x are μ's own tokens. Callers say it: True in a particle
      flow's right-hand side and in :meth:`velocity` without x, False at other points
      (``velocity(mu, x)``, a grid's faces) even where x equals μ's tokens in value, and
      wrappers pass it on to their parts (:func:`part_velocity`). None means the caller did
      not say (a caller outside tpde): :func:`queries_are_keys` then compares x with μ's
      tokens. A field that uses it (the spectral engine on the circle, a causal mask
      without query positions, a gradient computed at the particles only) declares the
      keyword; one that does not declare it is called without it (checked once per class);
    - ``time_dependent``: whether the parameters change with depth-time t (default True,
      the safe answer; fields with tensor parameters say False). A time-dependent field
      is evaluated at one time for a whole batch, so flows step its batch elements in
      lockstep.

    Provided here: :meth:`velocity` (the user-facing call), :meth:`check_measure`,
    :meth:`check_points`, :meth:`gaussian_rhs` (from ``gaussian_affine``),
    :meth:`gradient_structure`.

    Optional capabilities (:data:`CAPABILITIES`) follow from what the class implements:
    nothing is declared. ``capabilities`` is the derived set; a wrapper overrides it to take
    its parts' (so a sum of fields keeps Gaussians only if every part does). Ask with
    :func:`supports`.

    - ``"gaussian"``: ``gaussian_affine``;
    - ``"gaussian_derivative"``: also ``gaussian_affine_derivative(t, mean, cov) ->``
      :class:`AffineDerivative` (the closure's derivative in closed form);
    - ``"softmax_form"``: ``softmax_form(t, mu, x) -> SoftmaxForm``;
    - ``"gradient_flow"``: ``interaction(t) -> (A, V, dtype)``, ``energy``,
      ``first_variation``, ``first_variation_grad``, ``log_metric_weight`` and the class
      attributes ``metric_weighted`` (ω_μ = Z_μ or 1) and ``ascends_energy`` (the sign
      convention of :class:`tpde.fields.gradient_flow.structure.GradientStructure`);
    - ``"projection"``: ``project(points)``.

    Children: a composite field (a sum, a wrapper, a stack, a multi-head field) declares
    the fields it is built from in :meth:`children` (as :meth:`torch.nn.Module.children`),
    whatever it calls them: its capabilities (those of its class every child has), whether
    it needs positions (any child's), its measure checks (every child's) and the blame of a
    non-finite velocity on a field defined outside tpde follow from them; nothing probes
    attribute names. ``sums_children`` says that the velocity is the sum of the children's
    (a sum, a multi-head field, a parallel block): the norm schemes' rounding test bounds
    it term by term.

    A field whose parameters jump in depth-time lists the jumps in ``breakpoints`` and
    returns the field acting at t from ``piece(t)``: steps land on every jump.
    A field that cannot follow a Gaussian says why in :meth:`gaussian_refusal` (the
    message of :class:`GaussianNotPreserved`); it does not override ``gaussian_affine``.
    """

    #: Ambient dimension d of the tokens the field acts on.
    dim: int
    #: What overflows first when the velocity of finite tokens is not finite (messages).
    overflow_source: str = "the attention scores"
    #: Times at which piecewise parameters jump (``piece(t)`` gives the field between).
    breakpoints: tuple[float, ...] = ()
    #: Whether the velocity is the sum of the children's (class notes).
    sums_children: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("capabilities")
        if declared is not None and not isinstance(declared, property):
            raise TypeError(
                f"{cls.__name__} declares capabilities = {declared!r}; capabilities are "
                "derived from the methods a class implements (tpde.fields.CAPABILITIES "
                "lists which), so remove the declaration and implement the methods. A "
                "wrapper overrides the `capabilities` property to take its parts'."
            )

    def children(self) -> tuple[Field, ...]:
        """The fields this field is built from, its direct parts (as
        :meth:`torch.nn.Module.children`): default none. A composite field (a sum's parts, a
        wrapper's field, a stack's layers, a multi-head field's heads) returns them; its
        capabilities, positions and checks follow from them (class notes)."""
        return ()

    def children_output(self, t, like) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """How a field whose velocity sums its children's (``sums_children``) maps them:
        ``(W, b)`` with v = Σ_c W_cᵀ v_c + b, W of shape (..., C, d, d) and b of shape
        (..., d), each None where it is absent (the default: v = Σ_c v_c). A multi-head
        field returns its output matrices and bias (``like`` gives their dtype and device);
        the norm schemes' rounding bound reads them instead of probing attribute names."""
        return None, None

    @property
    def projection_owner(self) -> object:
        """What this field's ``project`` is the projection of: itself by default, the
        scheme of a normalised field. A sum whose parts all share one owner projects as
        its first part (:class:`tpde.fields.sum.Sum`)."""
        return self

    @property
    def capabilities(self) -> frozenset:
        """The capabilities of this field (class notes): derived, never declared. A field
        with children has those its class implements that every child has too (a wrapper
        keeps Gaussians only if its field does); a composite with another rule (a sum's
        shared projection, a scheme's retraction) overrides this property."""
        own = implemented_capabilities(type(self))
        children = self.children()
        return shared_capabilities(children, own) if children else own

    @property
    def time_dependent(self) -> bool:
        """Whether the parameters depend on t: a field with Q/K/V parameters (``params``)
        asks them; any other field defaults to True (the conservative answer)."""
        params = getattr(self, "params", None)
        return True if params is None else params.time_dependent

    @property
    def needs_positions(self) -> bool:
        """Whether the velocity depends on the tokens' positions (causal masks, positional
        encodings): such a field evaluates at points x other than μ's own tokens only with
        their ``positions``. A wrapper has it when a part has it and passes the positions on
        (``particle_velocity(..., positions=p)``, :func:`part_velocity`). Default: whether a
        child (:meth:`children`) uses them; False for a field without children."""
        return any(child.needs_positions for child in self.children())

    def supports(self, capability: str) -> bool:
        """Whether this field has ``capability`` (:func:`supports`)."""
        return supports(self, capability)

    #: The field type ``a + b`` builds, :class:`tpde.fields.Sum`: it declares itself with
    #: :func:`addition` (a Sum is a Field, so this module cannot import it).
    _addition: type | None = None

    def __add__(self, other):
        """``a + b``: the field whose velocity is Γ_a + Γ_b (:class:`tpde.fields.Sum`)."""
        if not isinstance(other, Field) or Field._addition is None:
            return NotImplemented
        return Field._addition([self, other])

    # ------------------------------------------------------------------ particles
    def velocity(
        self,
        mu: Measure,
        x=None,
        *,
        positions=None,
        t: float = 0.0,
        engine: str = "auto",
        info: InnerSolves | None = None,
    ):
        """Velocity Γ[μ](x) of the Transformer PDE.

        Parameters
        ----------
        mu : Empirical, Gaussian or Grid
            The measure the tokens attend to. For a Gaussian, the closed-form affine
            field of :meth:`gaussian_affine` is used and ``x`` is required. A Grid is
            seen through its cell masses at the cell centres (midpoint quadrature, as the
            Eulerian integrator does).
        x : tensor, shape (m, d), optional
            Where to evaluate; default: the particles of ``mu`` themselves (for a Grid,
            all its cell centres, in the order of :meth:`Grid.centres`).
        positions : tensor, shape (m,), optional
            The positions of the points ``x``: required with x when the field (or a part
            of it) uses positions (:attr:`needs_positions`), refused otherwise.
        t : float
            Depth-time, for time-dependent parameters.
        engine : str
            One of "auto", "dense", "chunked", "sdpa", "keops", "tiled", "spectral",
            "harmonics": how the pairwise sum is computed (see :mod:`tpde._engines`;
            "spectral" and "harmonics": softmax and exponential attention with A = βI,
            V = vI on the circle S¹ and on the sphere S²; "tiled": the unnormalised kernel
            sums of sigmoid, linear and exponential attention).
        info : InnerSolves, optional
            Collects the reports of inner solves (Sinkhorn scalings); a failed solve also
            warns (e.g. :class:`~tpde.fields.SinkhornNotConverged`).

        Returns
        -------
        tensor, shape (..., m, d) (leading dimensions from batched parameters).
        """
        engine = check_engine(engine)
        t = check_real(t, "t")
        piece = self.piece(t)
        if piece is not self:  # the field acting at t checks and evaluates (Mix-LN, stacks)
            if positions is not None and self.needs_positions and not piece.needs_positions:
                # the stack uses positions in another piece: checked here, not passed on
                self.check_measure(mu)
                at = None if x is None else self.check_points(x, mu)
                query_positions(positions, at, _positions_user(self), True)
                positions = None
            return piece.velocity(mu, x, positions=positions, t=t, engine=engine, info=info)
        self.check_measure(mu)
        if x is not None:
            x = self.check_points(x, mu)
        at = query_positions(positions, x, _positions_user(self), self.needs_positions)
        if isinstance(mu, Gaussian):
            if x is None:
                raise ValueError(
                    "velocity on a Gaussian needs evaluation points x of shape (m, d); a "
                    "Gaussian has no particles of its own."
                )
            c, B = self.gaussian_affine(t, mu.mean(), mu.cov())
            return c.unsqueeze(-2) + x @ B.transpose(-1, -2)
        if isinstance(mu, Grid):
            x = mu.centres() if x is None else x
            mu = mu.to_empirical()
        info = InnerSolves() if info is None else info
        start = len(info)
        own = x is None  # velocity(mu, x): new points, even if equal to μ's tokens
        x = mu.points if x is None else x
        out = part_velocity(self, t, mu, x, engine, info, at, own=own)
        check_velocity_type(out, self)
        check_velocity_shape(out, x, f"{type(self).__name__}.particle_velocity")
        info.warn(since=start, stacklevel=2)
        check_no_overflow(out, mu, "the velocity Γ[μ]", self)
        return out

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, *, own=None
    ) -> torch.Tensor:
        """Γ[μ](x) for an Empirical μ (checked) at points x; ``own``: whether x are μ's own
        tokens (True/False, or None: not said); see the class notes."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement particle_velocity(t, mu, x, engine, "
            "info), the one method every tpde field needs."
        )

    def piece(self, t: float) -> Field:
        """The field acting at time t (itself, unless the field is piecewise in time)."""
        return self

    # ------------------------------------------------------------------ Gaussians
    def gaussian_affine(self, t, mean, cov) -> tuple[torch.Tensor, torch.Tensor]:
        """Γ[N(α, Σ)](x) = c + B x: returns c (..., d) and B (..., d, d)."""
        raise GaussianNotPreserved(self.gaussian_refusal())

    def gaussian_refusal(self) -> str:
        """Why this field has no Gaussian moment closure (the GaussianNotPreserved text)."""
        return (
            f"{type(self).__name__} attention does not keep Gaussians Gaussian, so it has no "
            "moment closure; integrate particles instead (Empirical.from_gaussian)."
        )

    def gaussian_rhs(self, t, mean, cov) -> tuple[torch.Tensor, torch.Tensor]:
        """Moment ODE of the PDE started from a Gaussian.

        For an affine field c + Bx: α̇ = c + Bα,  Σ̇ = BΣ + ΣBᵀ (MATH.md §3).

        Parameters
        ----------
        mean : (..., d);  cov : (..., d, d), batch dimensions broadcast with the parameters'.

        Returns
        -------
        (dmean, dcov) with the broadcast batch shape.
        """
        c, B = self.gaussian_affine(t, mean, cov)
        BS = B @ cov
        return c + (B @ mean.unsqueeze(-1)).squeeze(-1), BS + BS.transpose(-1, -2)

    # ------------------------------------------------------------------ energies
    def energy(self, mu: Measure, *, t: float = 0.0, engine: str = "auto", info=None):
        """Energy whose (twisted) gradient flow the field is, where one exists."""
        raise NotImplementedError(
            f"{type(self).__name__} attention has no energy in tpde: it is not known to be "
            "a gradient flow (MATH.md §5)."
        )

    def domain_hint(self, mu) -> str:
        """Why the energy may be infinite at ``mu`` (a sentence for a JKO step's message), or
        "" (default: nothing known)."""
        return ""

    def gradient_structure(self, t: float = 0.0):
        """Sign, mobility and metric in which the field is a gradient flow (MATH.md §5).

        Returns a :class:`tpde.fields.gradient_flow.structure.GradientStructure` for the fields with
        the capability "gradient_flow" (Softmax, Sinkhorn) and parameters that make them
        one; raises :class:`NotAGradientFlow` saying which condition fails otherwise.
        """
        from tpde.fields.gradient_flow.structure import gradient_structure

        return gradient_structure(self, t)

    # ------------------------------------------------------------------ checks
    def check_measure(self, mu) -> None:
        """Raise unless ``mu`` is a tpde measure on this field's R^d that this field and each
        of its children accept: the checks below, then :meth:`check_measure_kind`, then
        every child's ``check_measure`` (:meth:`children`). The whole tree reads each of
        ``mu``'s tensors for finiteness once (:class:`tpde._validation.ValuesCheckedOnce`)."""
        with ValuesCheckedOnce():
            self._check_measure_alone(mu)
            self.check_measure_kind(mu)
            for child in self.children():
                child.check_measure(mu)

    def check_measure_kind(self, mu) -> None:
        """Raise where this field cannot act on ``mu``'s kind of measure although its
        children may (a Grid under a norm scheme, a Gaussian under a sum with a part that
        loses Gaussians); default: nothing. Runs after the generic checks, before the
        children's."""

    def _check_measure_alone(self, mu) -> None:
        """The generic checks of :meth:`check_measure`: a tpde measure, this field's d, finite
        values, a batch shape that broadcasts with the parameters'."""
        if not isinstance(mu, Empirical | Gaussian | Grid):
            raise TypeError(
                f"mu must be a tpde measure (Empirical, Gaussian or Grid); received "
                f"{type(mu).__name__}. Wrap points with tpde.measures.Empirical(points)."
            )
        dim = getattr(self, "dim", _MISSING)
        if dim is _MISSING:
            raise TypeError(
                f"{type(self).__name__} has no dim: every tpde field declares the dimension d "
                "of the tokens it acts on (set self.dim = d in __init__, or dim = None for a "
                "field that acts in every dimension)."
            )
        if dim is not None and mu.dim != dim:
            raise ValueError(
                f"dimension mismatch: the measure lives in d = {mu.dim} but {_acts_on(self)}."
            )
        check_measure_finite(mu)
        params = getattr(self, "params", None)
        batch = getattr(mu, "batch_shape", ())
        if params is not None and batch != () and params.batch_shape != ():
            try:
                torch.broadcast_shapes(params.batch_shape, batch)
            except RuntimeError:
                raise ValueError(
                    f"batch mismatch: the measure is a batch of shape {tuple(batch)} and the "
                    f"field's parameters a batch of shape {tuple(params.batch_shape)}; they "
                    "must broadcast (equal sizes, or 1), e.g. one parameter set per element."
                ) from None

    def check_points(self, x, mu) -> torch.Tensor:
        """x as a (m, d) tensor in μ's dtype (after :meth:`check_measure`: μ.dim = d)."""
        x = as_tensor(x, "x", dtype=mu.dtype, device=mu.device)
        if x.ndim != 2 or x.shape[1] != mu.dim:
            raise ValueError(f"x must have shape (m, {mu.dim}); received shape {tuple(x.shape)}.")
        check_finite(x, "x")
        return x
