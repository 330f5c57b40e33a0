"""The growth curve: search latency and vector recall as one org grows (python -m bench.speed.growth)."""
