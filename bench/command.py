"""What every bench command shares: its argument parser (the module docstring as help, `--out`
for the result file) and its end (the JSON result, the markdown table beside it, a plot when the
bench draws one). A command reads

    def main(argv=None) -> dict:
        ap = parser(__doc__, "service")          # --out defaults to bench/results/service.json
        ap.add_argument("--n", type=int, default=10_000)
        a = ap.parse_args(argv)
        ...
        return save(a.out, result, markdown)     # service.json + service.md, the table printed

so `python -m bench.<folder>.<bench> --help` says what it measures and where the figures go."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import RESULTS


def parser(doc: str | None, result: str | None, *, prog: str | None = None, folder: bool = False) -> argparse.ArgumentParser:
    """The command's parser: `doc` (the module docstring) as its description, and `--out`, the
    result's path, defaulting to bench/results/`result`.json (`folder`: bench/results/ itself, for
    benches that write several files named by `--name`). No `result`: no `--out`. `prog` defaults
    to `python -m <the calling module>`, the command a reader types."""
    if prog is None:
        caller = sys._getframe(1).f_globals.get("__spec__")
        prog = f"python -m {caller.name.removesuffix('.__main__')}" if caller else None
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if result is not None and folder:
        ap.add_argument("--out", type=Path, default=RESULTS, help="folder for the result files (default: bench/results)")
    elif result is not None:
        ap.add_argument(
            "--out",
            type=Path,
            default=RESULTS / f"{result}.json",
            help=f"the JSON result's path; a .md table is written beside it (default: bench/results/{result}.json)",
        )
    return ap


def save(out: str | Path, result: dict, markdown: str | None = None, plot=None, *, indent: int = 2, echo: bool = True) -> dict:
    """`out` (JSON), the same path with `.md` when there is a `markdown` table (printed unless
    `echo` is off, as for a checkpoint mid-run), and `.png` drawn by `plot(result, path)` when given;
    returns `result` for the caller and tests."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=indent, default=str) + "\n")
    written = [out]
    if markdown is not None:
        if echo:
            print(markdown)
        out.with_suffix(".md").write_text(markdown + "\n")
        written.append(out.with_suffix(".md"))
    if plot is not None:
        plot(result, out.with_suffix(".png"))
        written.append(out.with_suffix(".png"))
    if echo:
        print("written", *written)
    return result
