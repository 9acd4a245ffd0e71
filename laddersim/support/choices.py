"""The allowed values and defaults of options several tasks share, stated once.

The Python API's signatures (``laddersim.api``) take their defaults from here and from
``laddersim.support.limits``; the command line's flags read the same names (``choices=``, ``default=``),
so an option's allowed values and default are written in one place. A leaf module: it imports
nothing, so every layer may read it and ``import laddersim`` stays cheap.
"""

# Element types a scenario runs in (laddersim.model.workload.DTYPE_BYTES has their sizes; a test checks
# that the two name the same ones).
DTYPES = ("bfloat16", "float16", "float32")
# How the linear layers are quantized, and the KV cache's element type (laddersim.model.quantization
# has their records; a test checks that the names agree). FP8 is a quantization, not a dtype.
QUANTS = ("none", "fp8", "fp8-block", "nvfp4", "int8-weight", "int4-weight")
KV_CACHE_DTYPES = ("auto", "fp8")
# FP8 serving quantizes the linear layers (and optionally the KV cache), not every tensor.
FP8_DTYPE_REFUSAL = ("fp8 is not an element type of the whole pass; allowed: bfloat16, float16, float32, with "
                     "--quant fp8 (FP8 linear layers) and --kv-cache-dtype fp8 (FP8 KV cache)")
# gpt-fast's preallocated cache read in full each step, or one that grows with the sequence.
KV_CACHES = ("static", "dynamic")
# K/V copied to every query head (gpt-fast's repeat_interleave) or read once per KV head (GQA-aware).
KV_READS = ("repeat_interleave", "per_kv_head")
# laddersim/data/frameworks/*.yaml (checked by a test); a framework .yaml path is accepted too.
FRAMEWORKS = ("gpt-fast", "gpt-fast-flash", "gpt-fast-graph", "sglang", "trtllm", "trtllm-session", "vllm", "vllm-v0")
# AllReduce implementations a scenario may force over its framework's rule (laddersim.costs.allreduce_impls;
# a test checks that the records and laddersim.model.framework.AllReduceName name the same ones).
ALLREDUCES = ("nccl", "nvls", "pytorch-intra-node", "vllm-custom", "trtllm-custom", "sglang-custom")
SCHEDULE_FORMS = "standard, parallel, ladder, upper_bound, desync_half, hybrid:N"
DEFAULT_SCHEDULES = ("standard", "ladder")
# The batch sizes plan considers by default (concurrent users per replica).
DEFAULT_PLAN_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Where validate and fit write their reports unless told otherwise: under runs/ (git-ignored), so
# a run in a checkout never replaces the committed reports/ (only `laddersim report` writes there).
VALIDATION_REPORT_DIR = "runs/validation"
FIT_REPORT_DIR = "runs/fit"
# Which pass `kernels` lists: the first decode step after the prompt, or the prompt's prefill.
PHASES = ("decode", "prefill")
