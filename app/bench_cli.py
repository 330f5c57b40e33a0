"""`memscale bench ...`: the memory-scaling and LoCoMo benchmarks (options are the benchmarks' own;
`memscale bench scaling --help` prints them). Results go to bench/results/ unless `--out` says."""

from __future__ import annotations

import click

_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.group()
def bench() -> None:
    """Benchmarks: memory scaling on analytics spaces, LoCoMo."""


@bench.command("scaling", context_settings=_PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def scaling(args: tuple[str, ...]) -> None:
    """Memory scaling: hit rate, accuracy, steps and tokens as memory grows shard by shard."""
    from bench.quality.memory_scaling.__main__ import main

    main(list(args))


@bench.command("locomo", context_settings=_PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def locomo(args: tuple[str, ...]) -> None:
    """LoCoMo: evidence recall, answer F1 and baselines through /v1/context."""
    from bench.quality.locomo.__main__ import main

    main(list(args))
