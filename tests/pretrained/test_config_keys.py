"""Nothing silently ignored (issue 34): every key of a family's transformers config class is
read by tpde or listed as irrelevant, and every key tpde says it reads is read.

The oracle is transformers' own config class for each ``model_type`` of every registered
family (``AutoConfig.for_model(t).to_dict()``: every key it writes into a config.json). A
family declares its keys in its own module (``keys``, ``honoured``, ``biases``, ``optional``,
``aliases``, ``irrelevant``), so a family added by a new module is checked here unchanged.

A second oracle is transformers' modeling file of the class: every config attribute it reads
(an ``attribute_map`` name, a ``getattr`` default the class does not write) is read or
declared irrelevant too.

Three checks per (family, model_type), on transformers' default config with the heads
doubled (so that no derived default — ``head_dim = hidden/heads``, ``kv_heads = heads`` —
agrees with the class's by coincidence):

- coverage: class keys ⊆ read ∪ irrelevant (``COMMON_IRRELEVANT`` ∪ ``Family.irrelevant``),
  and no key both read and declared irrelevant by the family;
- defaults: with one read key left out, tpde reads the same hyper-parameters from the file as
  from transformers' reading of it (the class's default filled in), or refuses naming the key;
- honesty: a read key holding the string ``"oops"`` is refused by a LoadError naming it
  (under the few conditions that make the key count, :data:`COUNTS_WHEN`, and a family's
  own, :data:`COUNTS_WHEN_IN`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys

import pytest

from tpde.pretrained import LoadError
from tpde.pretrained._config import family_for, read_hyper, read_keys
from tpde.pretrained.families import FAMILIES
from tpde.pretrained.families.base import COMMON_IRRELEVANT

transformers = pytest.importorskip("transformers")
StrictDataclassFieldValidationError = pytest.importorskip(
    "huggingface_hub.errors"
).StrictDataclassFieldValidationError

CASES = [(entry.family, t) for entry in FAMILIES.values() for t in entry.model_types]

_ROPE_KEYS = ("rope_theta", "rope_local_base_freq", "rotary_emb_base", "rotary_pct",
              "partial_rotary_factor")  # fmt: skip

#: A read key that counts only beside other values (else transformers ignores it as well):
#: key → the config changes (None: the key removed) that make it count.
COUNTS_WHEN = {
    # rope_parameters, where present, holds these (and wins)
    **{key: {"rope_parameters": None} for key in _ROPE_KEYS},
    "original_max_position_embeddings": {
        "rope_parameters": None,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
    },
    "sliding_window_pattern": {"layer_types": None},  # layer_types, where present, wins
    "id2label": {"architectures": ["XForSequenceClassification"]},
    "num_labels": {"architectures": ["XForSequenceClassification"], "id2label": None},
    # Qwen's window: switched on, and layer_types (which wins) left out
    **{
        key: {"use_sliding_window": True, "layer_types": None}
        for key in ("sliding_window", "max_window_layers")
    },
}


def _longrope(entry, base: dict) -> dict:
    """LongRoPE (factors 1 over the rotated half-dimensions) with rope_parameters left out."""
    config = read_hyper(base, entry)
    half = (config.rotary_dims or config.head_dim) // 2
    factors = {"short_factor": [1.0] * half, "long_factor": [1.0] * half}
    return {"rope_parameters": None, "rope_scaling": {"rope_type": "longrope", **factors}}


#: Family → key → the config changes (a function of the entry and the base config) that make
#: the key count in that family, where they differ from COUNTS_WHEN's: Phi-3 reads no yarn
#: (transformers turns it into LongRoPE there; tpde refuses the old name), its C₀ counts under
#: LongRoPE.
COUNTS_WHEN_IN = {"phi3": {"original_max_position_embeddings": _longrope}}


def _counting(family: str, key: str, base: dict) -> dict:
    """The config changes under which ``key`` counts in ``family`` (COUNTS_WHEN_IN, else
    COUNTS_WHEN; {} where it always counts)."""
    own = COUNTS_WHEN_IN.get(family, {}).get(key)
    return own(FAMILIES[family], base) if own else COUNTS_WHEN.get(key, {})


def _names(message: str, key: str) -> bool:
    """``message`` names ``key`` as a whole (not inside use_sliding_window)."""
    return re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) is not None


def _entry_and_class(family: str, model_type: str):
    return FAMILIES[family], type(transformers.AutoConfig.for_model(model_type))


def _base(family: str, model_type: str) -> dict:
    """transformers' default config of ``model_type`` with twice its heads, as transformers
    writes it; the hidden size rounded up to a multiple of them where it is not one (a class
    whose heads are ``head_dim`` wide, not hidden/heads: Seed-OSS's 4096 over 80 × 128)."""
    entry, cls = _entry_and_class(family, model_type)
    raw = cls().to_dict()
    heads, hidden = entry.keys["heads"][0], entry.keys["hidden"][0]
    raw[heads] *= 2
    raw[hidden] = -(-raw[hidden] // raw[heads]) * raw[heads]
    return _through_transformers(cls, raw)


def _through_transformers(cls, raw: dict) -> dict:
    """The config.json transformers writes after reading ``raw`` (its defaults filled in)."""
    return cls.from_dict(dict(raw)).to_dict()


def _changed(raw: dict, changes: dict) -> dict:
    out = dict(raw)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _unaccounted(entry, cls) -> set:
    """The keys of transformers' config class ``cls`` that ``entry`` neither reads nor
    declares irrelevant."""
    keys = set(cls().to_dict())
    return keys - read_keys(entry) - set(COMMON_IRRELEVANT) - set(entry.irrelevant)


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_every_key_of_the_config_class_is_read_or_irrelevant(family, model_type):
    entry, cls = _entry_and_class(family, model_type)
    reads = read_keys(entry)
    unaccounted = _unaccounted(entry, cls)
    assert not unaccounted, (
        f"{cls.__name__} writes {sorted(unaccounted)}, which the family {family!r} neither "
        f"reads nor lists in its `irrelevant` (or COMMON_IRRELEVANT)"
    )
    assert not reads & set(entry.irrelevant), sorted(reads & set(entry.irrelevant))
    assert all(isinstance(why, str) and why for why in entry.irrelevant.values())


def test_the_table_is_what_a_family_module_declares():
    """A family's own module declares its table: without GPT-2's `irrelevant` the check
    above fails naming the multiple-choice head's keys; a key in `reads` is read."""
    entry, cls = _entry_and_class("gpt2", "gpt2")
    bare = dataclasses.replace(entry, irrelevant={})
    assert _unaccounted(bare, cls) == {
        "reorder_and_upcast_attn", "summary_type", "summary_use_proj", "summary_activation",
        "summary_proj_to_labels"}  # fmt: skip
    assert "n_ctx" not in read_keys(entry)
    assert "n_ctx" in read_keys(dataclasses.replace(entry, reads=("n_ctx",)))


def _modeling_reads(cls) -> set:
    """The config attributes that transformers' modeling file of config class ``cls`` reads
    (``config.x``, ``getattr(config, "x", …)``), but for its properties and methods (Falcon's
    ``head_dim``) and the keys and attribute_map names of the file's other config classes
    (Gemma-3's multimodal ``Gemma3Config``)."""
    modeling = importlib.import_module(cls.__module__.replace(".configuration_", ".modeling_"))
    source = inspect.getsource(modeling)
    names = set(re.findall(r"config\.(\w+)", source))
    names |= set(re.findall(r"getattr\(\s*(?:self\.)?config,\s*[\"'](\w+)", source))
    configs = vars(sys.modules[cls.__module__]).values()
    others = {key for c in configs if isinstance(c, type) and c is not cls
              and issubclass(c, transformers.PreTrainedConfig) and c.__module__ == cls.__module__
              for key in (*c().to_dict(), *c.attribute_map)}  # fmt: skip
    derived = {n for n in names if callable(getattr(cls, n, None))
               or isinstance(getattr(cls, n, None), property)}  # fmt: skip
    return {n for n in names - derived - others if not n.startswith("_")}


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_every_key_the_modeling_code_reads_is_read_or_irrelevant(family, model_type):
    """The second oracle: a key transformers' modeling code reads that its config class does
    not write (an attribute_map name such as BLOOM's num_attention_heads, a getattr default)
    is read or declared irrelevant too."""
    entry, cls = _entry_and_class(family, model_type)
    known = read_keys(entry) | set(COMMON_IRRELEVANT) | set(entry.irrelevant)
    assert not _modeling_reads(cls) - known, sorted(_modeling_reads(cls) - known)


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_a_key_left_out_reads_as_the_class_default(family, model_type):
    """config.json without the key: tpde's defaults are transformers' class defaults."""
    entry, cls = _entry_and_class(family, model_type)
    base = _base(family, model_type)
    for key in sorted(read_keys(entry) & set(base) - {"model_type"}):
        raw = _changed(base, {key: None})
        try:
            mine = read_hyper(raw, entry)
        except LoadError as err:  # a key tpde requires (transformers' default is a guess)
            assert _names(str(err), key), (key, str(err))
            continue
        theirs = read_hyper(_through_transformers(cls, raw), entry)
        differ = {
            f: (getattr(mine, f), getattr(theirs, f))
            for f in mine.__dataclass_fields__
            if getattr(mine, f) != getattr(theirs, f)
        }
        assert not differ, f"{key} left out: (tpde, transformers' default) = {differ}"


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_every_key_tpde_reads_is_checked(family, model_type):
    """A read key set to "oops" is refused naming the key: what read_keys lists is read."""
    entry, _ = _entry_and_class(family, model_type)
    base = _base(family, model_type)
    irrelevant = set(COMMON_IRRELEVANT) | set(entry.irrelevant)
    unchecked = []
    for key in sorted(read_keys(entry) - irrelevant - {"model_type"}):
        raw = _changed(base, {**_counting(family, key, base), key: "oops"})
        try:
            read_hyper(raw, entry)
        except LoadError as err:
            if not _names(str(err), key):
                unchecked.append((key, str(err)))
        else:
            unchecked.append((key, "accepted"))
    assert not unchecked, unchecked
    with pytest.raises(LoadError, match=r"x: config.json has model_type 'oops', which tpde"):
        family_for("oops", "x")


def test_the_base_config_is_what_tpde_reads():
    """The checks above start from a config tpde reads (transformers' defaults, heads
    doubled): llama's 64 heads of the 128 dimensions and 32 KV heads that LlamaConfig wrote
    out, 32 layers; left out, head_dim is 4096/64 (transformers' and tpde's)."""
    base = _base("llama", "llama")
    config = read_hyper(base, FAMILIES["llama"])
    assert (config.heads, config.head_dim, config.kv_heads, config.layers) == (64, 128, 32, 32)
    assert read_hyper(_changed(base, {"head_dim": None}), FAMILIES["llama"]).head_dim == 64


def _same_as_transformers(family: str, model_type: str, raw: dict):
    """tpde's hyper-parameters of ``raw`` and of transformers' reading of it, asserted equal."""
    entry, cls = _entry_and_class(family, model_type)
    mine, theirs = read_hyper(raw, entry), read_hyper(_through_transformers(cls, raw), entry)
    assert mine == theirs, (mine, theirs)
    return mine


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_an_explicit_null_head_count_or_head_dim_is_derived_as_transformers(family, model_type):
    """num_key_value_heads: null is H and head_dim: null is d/H (transformers' __post_init__ and
    attention), whatever the class's default for an absent key (Mistral's 8 KV heads)."""
    entry, cls = _entry_and_class(family, model_type)
    base = _base(family, model_type)
    for name, derived in (("kv_heads", "heads"), ("head_dim", None)):
        key = entry.keys.get(name, (None,))[0]
        if key not in base or key == entry.keys["heads"][0]:
            continue  # no such key (BERT's KV heads are its heads)
        raw = {**base, key: None}
        mine = read_hyper(raw, entry)
        expected = mine.heads if derived else mine.hidden // mine.heads
        assert getattr(mine, name) == expected
        try:
            theirs = _through_transformers(cls, raw)
        except StrictDataclassFieldValidationError:  # typed int (Mistral's KV heads): refused
            continue
        if theirs[key] is not None:  # transformers derived it (else: no oracle)
            assert mine == read_hyper(theirs, entry)


@pytest.mark.parametrize(("family", "model_type"), CASES)
def test_every_attribute_map_name_is_an_alias(family, model_type):
    """transformers' attribute_map names (BLOOM's num_hidden_layers, GPT-BigCode's
    hidden_size, Mixtral's num_experts) are the family's aliases of the same keys: the
    coverage check cannot see them (to_dict writes the keys they stand for)."""
    entry, cls = _entry_and_class(family, model_type)
    aliases = {a: k for a, k in entry.aliases.items() if a in cls.attribute_map}
    assert aliases == dict(cls.attribute_map)


ALIASED = [(f, t) for f, t in CASES if FAMILIES[f].aliases]


@pytest.mark.parametrize(("family", "model_type"), ALIASED)
def test_aliases_are_read_as_transformers(family, model_type):
    """An alias (attribute_map names, BLOOM's and Falcon's older n_embed) stands for its key;
    present beside it, it wins, as in transformers. The value is the key's, doubled where the
    family reads that doubled key (GPT-J's rotary_dim leaves its heads no room to double)."""
    entry = FAMILIES[family]
    base = _base(family, model_type)
    renamed = {alias: base[key] for alias, key in entry.aliases.items() if key in base}
    gone = dict.fromkeys(entry.aliases[alias] for alias in renamed)
    config = _same_as_transformers(family, model_type, _changed(base, {**gone, **renamed}))
    assert config == read_hyper(base, entry)
    doubled = 0
    for alias, key in entry.aliases.items():
        try:
            expected = read_hyper({**base, key: 2 * base[key]}, entry)
        except LoadError:
            continue
        assert _same_as_transformers(family, model_type, {**base, alias: 2 * base[key]}) == (
            expected
        ), alias
        doubled += expected != config
    assert doubled >= 1
