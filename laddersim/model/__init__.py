"""What runs: the model's shape from a preset or a Hugging Face config.json (``shape``), the
workload (batch, lengths, dtype, KV cache; ``workload``) and the serving framework's software
choices (kernel paths, KV cache, AllReduce; ``framework``, ``kernel_calibration``)."""
