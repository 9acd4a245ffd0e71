"""The serving framework a scenario runs under (``--framework gpt-fast|vllm``): how its kernels,
KV cache and collectives are built, as sourced data files under ``laddersim/data/frameworks/``.

The hardware profile says what a GPU and its links cost; the framework says which kernels a
forward pass launches on them: whether a batch-1 linear is a generated reduction fused with its
neighbours or a library GEMM, which AllReduce kernel runs, how attention reads the KV cache.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from laddersim.config_files import build, read_yaml_mapping
from laddersim.errors import UserInputError
from laddersim.hardware.sourced import Positive

FRAMEWORKS_DIR = Path(__file__).resolve().parent / "data" / "frameworks"
_FROZEN = ConfigDict(frozen=True, extra="forbid")
Value = TypeVar("Value")


class Choice(BaseModel, Generic[Value]):
    """A categorical setting and where it came from."""

    model_config = _FROZEN

    value: Value
    source: str = Field(min_length=3)


class FusedKinds(BaseModel):
    """Op kinds whose kernel a generated single-token linear absorbs (no kernel floor of their own)."""

    model_config = _FROZEN

    kinds: list[Literal["act", "collective_input_copy", "rope", "attn_norm", "mlp_norm"]]
    source: str = Field(min_length=3)


class Framework(BaseModel):
    """One framework's kernel-path and cache settings (see the module docstring)."""

    model_config = _FROZEN

    name: str
    description: str = ""
    kv_cache: Choice[Literal["static", "dynamic"]]
    kv_reads: Choice[Literal["repeat_interleave", "per_kv_head"]]
    # generated: a linear with one row (M = 1) is a generated reduction kernel streaming the
    # weights, fused with the ``fused_into_single_token_linear`` ops; library: a cuBLAS GEMM at every M.
    single_token_linear: Choice[Literal["generated", "library"]]
    fused_into_single_token_linear: FusedKinds
    # A library GEMM split along K (laddersim.costs.op_costs.splits_k) runs a second kernel
    # summing the partials; False where the GEMM tables already time the framework's own call.
    splitk_reduce_kernel: Choice[bool]
    # Does the framework copy each collective's input on the compute stream first? (How many
    # copies, and their source, is the profile's framework.collective_input_copies.)
    collective_input_copy: Choice[bool]
    # nccl: the profile's NCCL model; multimem: the profile's multimem table where it ships one.
    allreduce_library: Choice[Literal["nccl", "multimem"]]
    # Prefill attention throughput relative to the profile's attention_compute_efficiency.
    prefill_attention_speedup: Positive


def framework_names() -> list[str]:
    return sorted(p.stem for p in FRAMEWORKS_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def load_framework(name: str) -> Framework:
    """A framework by name (``gpt-fast``, ``vllm``)."""
    path = FRAMEWORKS_DIR / f"{name}.yaml"
    if not path.exists():
        raise UserInputError(f"framework: unknown '{name}'; allowed: {', '.join(framework_names())}")
    return build(Framework, read_yaml_mapping(path, "framework"), f"framework {path.name}")
