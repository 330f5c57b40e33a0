"""Benchmark: cartridges vs in-context vs no context on a generated org corpus."""
