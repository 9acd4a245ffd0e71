"""The parameters of the API's tasks as typed objects, each range checked here, once.

A task's public function (``laddersim.simulate``) keeps its keyword signature and builds these
objects in one line (``ScenarioParams.pick(locals())``); the command line parses its flags into the
same objects (``ScenarioParams.pick(vars(args))``, its argparse types checking syntax only), so a
value out of range is the same one line from either: ``UserInputError("batch: must be a positive
integer up to 1048576, got 0")``, the field named as its flag is (``prompt-len``). The objects are
frozen pydantic models that refuse unknown fields; their field defaults are the tasks' defaults,
read by the signatures (``SCENARIO.batch``) and the flags (``laddersim.cli.args.default_of``).

* ``ScenarioParams``: one scenario (model, hardware, TP, PP, workload, framework, the what-if
  overrides of the profile, as a sweep grid takes them);
* ``RunOptions``: how one scenario is simulated (jitter, its seed, the decode steps simulated).

The serving and planning tasks' objects are in ``serving_params`` and ``plan_params``, built from
the same field types (``Count``, ``Number``, ...), so a field shared by two tasks has one rule.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, ClassVar, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, field_validator, model_validator

from laddersim.errors import UserInputError
from laddersim.support.choices import (ALLREDUCES, DTYPES, FP8_DTYPE_REFUSAL, FRAMEWORKS, KV_CACHE_DTYPES, KV_CACHES,
                                       KV_READS, QUANTS)
from laddersim.support.limits import (
    DEFAULT_GEN_LEN,
    DEFAULT_PROMPT_LEN,
    EXCLUSIVE_PAIRS,
    MAX_BATCH,
    MAX_JITTER,
    MAX_SAMPLE_STEPS,
    MAX_SEED,
    MAX_TOKENS,
    MAX_TP,
    OVERRIDE_COLUMNS,
    override_problem,
)

MAX_COUNT = 2**31 - 1  # a count with no bound of its own (workers, decode steps sampled, options shown)


def flag_name(field: str) -> str:
    """A field as its flag and its messages spell it: ``prompt_len`` -> ``prompt-len``."""
    return field.replace("_", "-")


def shown(value) -> str:
    """``value`` as a message quotes it: numbers as written (3, 0.05, inf), anything else repr'd
    and cut at 40 characters."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


# ---- field rules: a before-validator each, raising "must be <allowed>, got <value>" ---------------

def _whole(value) -> int | None:
    """``value`` as an int when it is a whole number (an int, a numpy integer, 2.0), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def count(low: int, high: int, *, optional: bool = False) -> BeforeValidator:
    """A whole number from ``low`` to ``high`` (None too when ``optional``)."""
    allowed = f"a positive integer up to {high}" if low == 1 else f"an integer from {low} to {high}"

    def check(value):
        if value is None and optional:
            return None
        whole = _whole(value)
        if whole is None or not low <= whole <= high:
            raise ValueError(f"must be {allowed}, got {shown(value)}")
        return whole
    return BeforeValidator(check)


def number(low: float, high: float, *, above: bool = False, optional: bool = False) -> BeforeValidator:
    """A real number from ``low`` (or above it, ``above``) to ``high``; None too when ``optional``."""
    allowed = f"a number > {low:g} and <= {high:g}" if above else f"a number from {low:g} to {high:g}"

    def check(value):
        if value is None and optional:
            return None
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not ok or not ((low < value) if above else (low <= value)) or not value <= high:
            raise ValueError(f"must be {allowed}, got {shown(value)}")
        return float(value)
    return BeforeValidator(check)


def one_of(allowed: tuple[str, ...], *, optional: bool = False) -> BeforeValidator:
    """One of the names ``allowed`` (None too when ``optional``)."""
    def check(value):
        if value is None and optional:
            return None
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {shown(value)}")
        return value
    return BeforeValidator(check)


def _switch(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be True or False, got {shown(value)}")
    return value


def _framework(value) -> str:
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if text in FRAMEWORKS or (text.endswith((".yaml", ".yml")) and Path(text).is_file()):
            return text
    raise ValueError(f"must be one of {', '.join(FRAMEWORKS)} or an existing framework .yaml file, got {shown(value)}")


def _reference(what: str, kind: str):
    """A name or path (str or os.PathLike), or an object of the class named ``kind`` (a
    ModelShape, a HardwareProfile: checked by name, so that this module loads neither)."""
    def check(value):
        if isinstance(value, (str, os.PathLike)) and os.fspath(value).strip():
            return value
        if any(cls.__name__ == kind for cls in type(value).__mro__):
            return value
        raise ValueError(f"must be {what} or a {kind}, got {shown(value)}")
    return BeforeValidator(check)


def _path(value):
    if value is None or (isinstance(value, (str, os.PathLike)) and os.fspath(value).strip()):
        return value
    raise ValueError(f"must be a path, got {shown(value)}")


def _names(value):
    """A list of names; one name alone (not in a list) is a list of one, not its characters."""
    if value is None:
        return None
    items = [value] if isinstance(value, (str, os.PathLike)) else value
    if not isinstance(items, (list, tuple)) or not items or \
            not all(isinstance(v, (str, os.PathLike)) and os.fspath(v).strip() for v in items):
        raise ValueError(f"must be a name or a list of names, got {shown(value)}")
    return [os.fspath(v) for v in items]


def counts(low: int, high: int, *, optional: bool = False) -> BeforeValidator:
    """A list of whole numbers from ``low`` to ``high``; one number alone is a list of one."""
    one = count(low, high).func
    allowed = f"positive integers up to {high}" if low == 1 else f"integers from {low} to {high}"

    def check(value):
        if value is None and optional:
            return None
        items = [value] if isinstance(value, (numbers.Number, str)) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError(f"must be {allowed}, got {shown(value)}")
        try:
            return [one(v) for v in items]
        except ValueError:
            bad = next(v for v in items if _whole(v) is None or not low <= _whole(v) <= high)
            raise ValueError(f"must be {allowed}, got {shown(bad)}") from None
    return BeforeValidator(check)


def checked(field: str, rule: BeforeValidator, value):
    """``value`` through one field rule outside a parameter object (a task's lone option), or one
    ``UserInputError`` line naming ``field``."""
    try:
        return rule.func(value)
    except ValueError as exc:
        raise UserInputError(f"{flag_name(field)}: {exc}") from None


WORKERS = count(1, MAX_COUNT, optional=True)  # processes (None: all cores)

Switch = Annotated[bool, BeforeValidator(_switch)]
Framework = Annotated[str, BeforeValidator(_framework)]
Model = Annotated[Any, _reference("a preset name, a config.json path", "ModelShape")]
Hardware = Annotated[Any, _reference("a profile name, a profile path", "HardwareProfile")]
OptionalPath = Annotated[Any, BeforeValidator(_path)]
Names = Annotated[Any, BeforeValidator(_names)]
Tp = Annotated[int, count(1, MAX_TP)]
Batch = Annotated[int, count(1, MAX_BATCH)]
Tokens = Annotated[int, count(1, MAX_TOKENS)]
def _dtype(value):
    if value == "fp8":  # a quantization of the linears, not the pass's element type
        raise ValueError(FP8_DTYPE_REFUSAL)
    return one_of(DTYPES).func(value)


Dtype = Annotated[str, BeforeValidator(_dtype)]
Quant = Annotated[str, one_of(QUANTS)]
KvCacheDtype = Annotated[str, one_of(KV_CACHE_DTYPES)]
Seed = Annotated[int, count(0, MAX_SEED)]


class Params(BaseModel):
    """A task's parameters: frozen, unknown fields refused, a bad value one UserInputError line."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    # A field whose flag is named otherwise (plan's ``tps`` list is ``--tp``): the name messages use.
    SHOWN: ClassVar[dict[str, str]] = {}

    @classmethod
    def of(cls, **values):
        """The object, or one ``UserInputError`` line naming the first bad field."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise UserInputError(validation_line(exc, cls.SHOWN)) from None

    @classmethod
    def pick(cls, values: Mapping[str, Any], **given):
        """``of`` the entries of ``values`` named like a field (a function's ``locals()``, the
        command line's ``vars(args)``), and ``given`` (renamed or computed ones)."""
        return cls.of(**{name: values[name] for name in cls.model_fields if name in values and name not in given},
                      **given)

    @classmethod
    def defaults(cls) -> SimpleNamespace:
        """The fields' defaults by name (``SCENARIO.batch``), for signatures and flags."""
        return SimpleNamespace(**{name: f.default for name, f in cls.model_fields.items() if not f.is_required()})


def validation_line(exc: ValidationError, shown_names: Mapping[str, str] | None = None) -> str:
    """The first error as one line: ``<field>: <message>``, the field as ``shown_names`` names it
    or as its flag is spelled (a rule over several fields names its field in its own message)."""
    err = exc.errors()[0]
    message = str(err["msg"]).removeprefix("Value error, ")
    if not err["loc"]:
        return message
    name = str(err["loc"][0])
    field = flag_name((shown_names or {}).get(name, name))
    if err["type"] == "missing":
        return f"{field}: required"
    if err["type"] == "extra_forbidden":
        return f"{field}: unknown parameter"
    return message if message.startswith(f"{field}: ") else f"{field}: {message}"


class ScenarioParams(Params):
    """One scenario: what runs (``model``), where (``hardware``), split how (``tp`` ranks per
    group, ``pp`` stages, ``pp_microbatches`` in flight), on which workload (``batch`` sequences
    of ``prompt_len`` + ``gen_len`` tokens, ``dtype``; the linears quantized as ``quant``, the KV
    cache in ``kv_cache_dtype``), with whose kernels (``framework``; its ``kv_cache``, ``kv_reads``
    and AllReduce rule, ``allreduce``, overridden when given), and what-if changes of the profile (the
    override columns of a sweep grid: scales, or set values in GB/s and us, converted for the
    scenario's TP group as a sweep converts them; None leaves the profile's)."""

    model: Model
    hardware: Hardware
    tp: Tp
    pp: Tp = 1
    pp_microbatches: Batch = 1
    ep: Tp = 1  # a mixture-of-experts model's expert-parallel ranks within each TP group
    # Data-parallel attention (vLLM --data-parallel-size ep/tp --enable-expert-parallel, SGLang
    # --enable-dp-attention --dp-size ep/tp): ep/tp attention replicas of TP tp, experts over all ep GPUs.
    dp_attention: Switch = False
    batch: Batch = 1
    prompt_len: Tokens = DEFAULT_PROMPT_LEN
    gen_len: Tokens = DEFAULT_GEN_LEN
    dtype: Dtype = "bfloat16"
    quant: Quant = "none"
    kv_cache_dtype: KvCacheDtype = "auto"
    framework: Framework = "gpt-fast"
    kv_cache: Annotated[str | None, one_of(KV_CACHES, optional=True)] = None
    kv_reads: Annotated[str | None, one_of(KV_READS, optional=True)] = None
    allreduce: Annotated[str | None, one_of(ALLREDUCES, optional=True)] = None  # None: the framework's rule
    intra_bandwidth_scale: float | None = None  # x the intra-node AllReduce bandwidth
    intra_bandwidth_gbps: float | None = None  # the TP group's intra-node large-message bus bandwidth, GB/s
    intra_latency_scale: float | None = None  # x the intra-node AllReduce latency
    intra_latency_us: float | None = None  # its small-message time, us
    inter_bandwidth_scale: float | None = None  # x the inter-node (network tier) bandwidth
    inter_bandwidth_gbps: float | None = None  # the network tier's bus bandwidth, GB/s
    inter_latency_scale: float | None = None  # x the inter-node latency
    inter_latency_us: float | None = None  # the network tier's latency across the nodes, us
    nics_per_node: float | None = None  # NICs sharing the inter-node traffic (a NIC per GPU at most)
    compute_slowdown: float | None = None  # GEMM slowdown while an AllReduce runs (fraction)
    comm_slowdown: float | None = None  # AllReduce slowdown while compute runs (fraction)
    gpus_per_node: float | None = None  # GPUs per node (a whole number): the same GPUs repacked

    @field_validator(*OVERRIDE_COLUMNS, mode="before")
    @classmethod
    def _override(cls, value, info):
        if value is None:
            return None
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"must be a number, got {shown(value)}")
        if (problem := override_problem(info.field_name, float(value))) is not None:
            raise ValueError(problem)
        return float(value)

    @model_validator(mode="after")
    def _one_of_each_pair(self) -> "ScenarioParams":
        for scale, set_value in EXCLUSIVE_PAIRS:
            if getattr(self, scale) is not None and getattr(self, set_value) is not None:
                raise ValueError(f"{flag_name(set_value)}: give {flag_name(scale)} or {flag_name(set_value)}, "
                                 "not both")
        return self

    def what_if(self) -> dict[str, float]:
        """The overrides given (column -> value), in the order of a sweep's columns."""
        return {c: getattr(self, c) for c in OVERRIDE_COLUMNS if getattr(self, c) is not None}


class RunOptions(Params):
    """How one scenario is simulated: ``jitter``, the sigma of per-rank lognormal op-time noise (0:
    none), drawn with ``seed``; with it, ``exact_steps`` simulates every decode step, else
    ``sample_steps`` of them (None: about 120,000 op-rank runs, 4 to 64 steps)."""

    jitter: Annotated[float, number(0.0, MAX_JITTER)] = 0.0
    seed: Seed = 0
    exact_steps: Switch = False
    sample_steps: Annotated[int | None, count(1, MAX_SAMPLE_STEPS, optional=True)] = None

    def sim_options(self):
        """The simulator's SimOptions, given by keyword."""
        from laddersim.simulation.simulate import SimOptions

        return SimOptions(jitter=self.jitter, seed=self.seed, exact_steps=self.exact_steps,
                          sample_steps=self.sample_steps)


SCENARIO = ScenarioParams.defaults()
RUN = RunOptions.defaults()
