"""Lowering: a model and a workload to one program per rank (the Megatron block structure, host
work, pipeline stages, shard sizes)."""
