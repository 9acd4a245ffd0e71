"""The report's sections, in the order ``laddersim.reporting.build`` writes them (``report --help``
names them): a module of its own so the command line reads them without loading the report."""

SECTIONS = ("paper reproduction (Llama-3.1-70B, measured vs predicted)", "bandwidth what-if sweep (8B, 70B, 405B)",
            "decode-step timeline (70B, TP 8)", "planning example (70B on one node)",
            "multi-node (405B at TP 16/32/64, 70B at TP 16)", "serving under load (70B, TP 8)",
            "pipeline x tensor parallel (405B on 2 nodes, 70B P2P on/off)",
            "Ladder against a custom all-reduce (NCCL, vLLM, TRT-LLM, SGLang baselines on five machines)",
            "what Ladder gives an MoE model (Mixtral-8x22B, Qwen3-235B-A22B; TP 8 vs TP 8 x EP 8)")
