"""The search path's Python overhead, side by side in one process at LoCoMo scale (2,760 turns,
5 private users): an earlier commit's `app/search/repository.py` and sentence-transformers'
`encode` ("old") against this checkout's repository and direct encoder ("new"), alternated in
blocks of 20 questions, in-process over the real service (TestClient: auth, RLS, JSON included).

    .venv/bin/python -m bench.tools.locomo_python_ab [--against 36984ad] [--rounds 6]

Prints p50/p95 per arm and kind (search one type, all types, context at 1,000 tokens), their
ratios new/old, and on how many of 40 questions the two arms' top 10 differ (must be 0).
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[2]


def _module_at(rev: str, path: str, name: str):  # noqa: ANN202
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
                         text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, f.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.unlink(f.name)
    return mod


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.tools.locomo_python_ab")
    ap.add_argument("--against", default="36984ad")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args(argv)

    import app.search.service as search_service
    from app.kit.embedding import LocalEmbedder
    from bench.common import pct
    from bench.quality.locomo.data import load
    from bench.quality.locomo.run import Service

    repos = {"new": search_service.repo, "old": _module_at(a.against, "app/search/repository.py", "old_repository")}
    direct = LocalEmbedder.embed  # this checkout's (ONNX Runtime by default since the fifteenth stop)

    def encode(self, texts):  # noqa: ANN001, ANN202 - the earlier path: SentenceTransformer.encode
        return self._model.encode(texts, batch_size=self._batch, normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False).astype("float32")

    def arm(name: str) -> None:
        search_service.repo = repos[name]
        LocalEmbedder.embed = direct if name == "new" else encode

    convs = load()
    svc = Service("memscale_bench_locomo_ab", convs, model="local/smollm2")
    try:
        for c in convs:
            svc.ingest(c)
        svc.settle()
        logging.getLogger("memscale.access").disabled = True
        qs = [(c.sample_id, q.question) for c in convs for q in c.qa]
        random.seed(1)
        sample = random.sample(qs, 20 * a.rounds)

        def h(sid: str) -> dict:
            return {"Authorization": f"Bearer {svc.clients[sid].api_key}"}

        kinds = {"search": ("/v1/search", lambda q: {"query": q, "types": ["episode"], "k": 10}),
                 "search all types": ("/v1/search", lambda q: {"query": q, "k": 10}),
                 "context 1000": ("/v1/context", lambda q: {"query": q, "budget_tokens": 1000})}
        times: dict = {n: {k: [] for k in kinds} for n in ("old", "new")}
        for n in times:  # warm both
            arm(n)
            for sid, q in sample[:5]:
                svc.http.post("/v1/search", json={"query": q}, headers=h(sid))
        for rnd in range(a.rounds):
            block = sample[rnd * 20:(rnd + 1) * 20]
            for n in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
                arm(n)
                for k, (path, body) in kinds.items():
                    for sid, q in block:
                        t = time.perf_counter()
                        r = svc.http.post(path, json=body(q), headers=h(sid))
                        times[n][k].append((time.perf_counter() - t) * 1000)
                        assert r.status_code == 200, r.text
        differ = 0
        for sid, q in sample[:40]:
            tops = []
            for n in ("old", "new"):
                arm(n)
                tops.append([x["id"] for x in svc.http.post("/v1/search", json={"query": q, "k": 10},
                                                            headers=h(sid)).json()["results"]])
            differ += tops[0] != tops[1]
        out = {"against": a.against, "top10_differ_of_40": differ, "load": list(os.getloadavg()), "kinds": {}}
        for k in kinds:
            o, n = times["old"][k], times["new"][k]
            out["kinds"][k] = {"old": [round(pct(o, 50), 1), round(pct(o, 95), 1)],
                               "new": [round(pct(n, 50), 1), round(pct(n, 95), 1)],
                               "ratio": [round(pct(n, 50) / pct(o, 50), 3), round(pct(n, 95) / pct(o, 95), 3)]}
        print(out)
        return out
    finally:
        arm("new")
        svc.close()


if __name__ == "__main__":
    main()
