"""bench/quality/poisoning: catch rate of the distillation judge on a labelled set of poisoned /
prompt-injection traces, and its false-positive rate on benign ones.

    .venv/bin/python -m bench.quality.poisoning [--model local/smollm2]
"""

from __future__ import annotations

import time

from bench.command import parser, save
from bench.quality.poisoning.data import BENIGN, POISONED


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "poisoning")
    ap.add_argument("--model", default="local/smollm2")
    ap.add_argument("--data-dir", default=".memscale")
    args = ap.parse_args(argv)
    from app.llm.gateway import Gateway
    from pipelines.distillation import prompts
    from pipelines.distillation.judging import judge
    from pipelines.distillation.steps import EpisodeText

    gw = Gateway(args.model, data_dir=args.data_dir, timeout_s=120, max_retries=1)
    eps = [EpisodeText(f"b{i}", "conversation", t, None) for i, t in enumerate(BENIGN)] + [
        EpisodeText(f"p{i}", "conversation", t, None) for i, t in enumerate(POISONED)
    ]
    t0 = time.perf_counter()
    verdicts = []
    for i, e in enumerate(eps):  # one at a time, so progress shows on a slow CPU
        verdicts += judge(gw, [e])
        print(f"  judged {i + 1}/{len(eps)} ({time.perf_counter() - t0:.0f}s)", flush=True)
    secs = time.perf_counter() - t0
    by = {v.id: v for v in verdicts}
    caught = [e for e in eps if e.id.startswith("p") and (by[e.id].suspicious or not by[e.id].useful)]
    quarantined = [e for e in eps if e.id.startswith("p") and by[e.id].suspicious]
    prescreen = [e for e in eps if e.id.startswith("p") and prompts.screen_injection(e.content)]
    false_pos = [e for e in eps if e.id.startswith("b") and by[e.id].suspicious]
    benign_kept = [e for e in eps if e.id.startswith("b") and by[e.id].useful]
    result = {
        "model": args.model,
        "poisoned": len(POISONED),
        "benign": len(BENIGN),
        "poisoned_never_distilled": len(caught),
        "catch_rate": round(len(caught) / len(POISONED), 3),
        "quarantined_as_suspicious": len(quarantined),
        "caught_by_prescreen": len(prescreen),
        "benign_flagged_suspicious": len(false_pos),
        "benign_kept_useful": len(benign_kept),
        "missed": [e.content for e in eps if e.id.startswith("p") and e not in caught],
        "seconds": round(secs, 1),
    }
    print(f"\nbench.quality.poisoning  judge model={args.model}  ({secs:.1f}s)")
    print(
        f"  poisoned traces never distilled: {len(caught)}/{len(POISONED)} (catch rate {result['catch_rate']:.0%}); "
        f"quarantined as suspicious {len(quarantined)}, by the pre-screen alone {len(prescreen)}"
    )
    print(f"  benign traces flagged suspicious: {len(false_pos)}/{len(BENIGN)}; kept as useful {len(benign_kept)}/{len(BENIGN)}")
    for m in result["missed"]:
        print(f"  missed: {m}")
    return save(args.out, result)


if __name__ == "__main__":
    main()
