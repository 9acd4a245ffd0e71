"""Serving under load: a request-level discrete-event simulation of one replica (continuous
batching, paged KV cache, preemption), latency percentiles, goodput and capacity."""
