"""Screenshots of the console's main pages for the README: a small demo org in a fresh database
(`memscale_console_demo` on the embedded server), served on loopback, each page driven in headless
Chromium (Playwright, Debian's `chromium`) at 1280 px and written to docs/img/console-<page>.png.

    .venv/bin/python -m bench.tools.console_screens [--out docs/img]

The tests never write here (tests/test_console.py keeps its screenshots in a temporary folder).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.common import fresh_database, serve_in_thread

# Open a page and mark it loading; the router clears the mark when it has drawn (a hash already
# current would fire no hashchange, so it is left as it is).
GO = "h => { if (location.hash !== h) { document.getElementById('view').setAttribute('aria-busy', 'true'); location.hash = h; } }"
EPISODES = [
    ("conversation", "Customer asked to archive 2018 invoices; we moved them to the cold bucket after the 7-year hold.", "org"),
    ("trajectory", "Deploy of billing-api failed: cache was cold, warmed it and retried, green on second run.", "org"),
    ("feedback", "The agent quoted the old refund window (14 days); it is 30 days since March.", "private"),
    ("note", "Ops rotates the invoice bucket keys on the first Monday of every month.", "group"),
]
MEMORIES = [
    ("Invoices are archived to the cold bucket after a 7-year hold.", "rule", "org", [0]),
    ("Warm the cache before retrying a failed billing-api deploy.", "procedure", "org", [1]),
    ("The refund window is 30 days.", "fact", "private", [2]),
    ("Invoice bucket keys rotate on the first Monday of each month.", "procedure", "group", [3]),
]

ASSETS = [  # (kind, source, title, visibility): what bootstrap would have written from the org's sources
    ("document", "wiki://finance/invoice-retention", "Invoice retention policy", "org"),
    ("document", "wiki://sre/billing-api-runbook", "billing-api deploy runbook", "group"),
    ("table_schema", "postgresql://billing/public/invoices", "billing.public.invoices", "org"),
    ("table_schema", "postgresql://billing/public/refunds", "billing.public.refunds", "org"),
    ("glossary", "wiki://finance/glossary", "Finance glossary", "org"),
]
ASSET_ROW = (
    "INSERT INTO knowledge_assets (org_id, owner_id, visibility, groups, kind, source_uri, title, content_hash)"
    " VALUES (:o, :u, :v, :g, :k, :src, :t, md5(:src))"
)


def seed_assets(engine, org_id, owner_id) -> None:
    """Knowledge assets as rows (bootstrapping real sources would need the sources and the LLM)."""
    with engine.begin() as c:
        for kind, src, title, v in ASSETS:
            c.execute(
                text(ASSET_ROW),
                {"o": org_id, "u": owner_id, "v": v, "g": ["ops"] if v == "group" else [], "k": kind, "src": src, "t": title},
            )


def seed(http: httpx.Client, keys: dict[str, str]) -> dict:
    h = {n: {"Authorization": f"Bearer {k}"} for n, k in keys.items()}
    ops = lambda v: {"visibility": v, **({"groups": ["ops"]} if v == "group" else {})}  # noqa: E731
    eps = [
        http.post("/v1/episodes", json={"kind": k, "content": c, **ops(v)}, headers=h["dana"]).json()["id"]
        for k, c, v in EPISODES
    ]
    mems = [
        http.post(
            "/v1/memories",
            json={"text": t, "kind": k, **ops(v), "sources": [{"type": "episode", "id": eps[i]} for i in src]},
            headers=h["dana"],
        ).json()["id"]
        for t, k, v, src in MEMORIES
    ]
    http.patch(f"/v1/memories/{mems[2]}", json={"text": "The refund window is 30 days (since March)."}, headers=h["dana"])
    http.post(
        f"/v1/memories/{mems[1]}/declassify", json={"visibility": "org", "reason": "reviewed by the SRE lead"}, headers=h["sam"]
    )
    http.post("/v1/branches", json={"name": "refund-policy-2027"}, headers=h["sam"])
    http.post(
        "/v1/memories",
        json={"text": "From 2027 the refund window is 45 days.", "kind": "rule", "visibility": "org"},
        headers={**h["sam"], "Memscale-Branch": "refund-policy-2027"},
    )
    http.post("/v1/jobs", json={"kind": "distill"}, headers=h["sam"])
    http.post("/v1/jobs", json={"kind": "consolidate"}, headers=h["sam"])
    http.delete(f"/v1/users/{keys['leaver_id']}/data", headers=h["leaver"])
    for q in ("invoice archive", "refund window"):
        http.post("/v1/search", json={"query": q}, headers=h["dana"])
    return {"memory": mems[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from app.orgs import service as orgs

    settings = fresh_database("memscale_console_demo").model_copy(update={"log_level": "WARNING"})
    engine = create_engine(settings.database_url)
    with Session(engine, expire_on_commit=False) as db:
        org = orgs.create_org(db, "acme")
        dana = orgs.create_user(db, org, "dana", groups=["ops"])
        sam = orgs.create_user(db, org, "sam", roles=["steward", "auditor"], groups=["ops"])
        leaver = orgs.create_user(db, org, "leaver")
        keys = {
            "dana": orgs.create_key(db, dana),
            "sam": orgs.create_key(db, sam),
            "leaver": orgs.create_key(db, leaver),
            "leaver_id": str(leaver.id),
        }
        db.commit()
    seed_assets(engine, org.id, dana.id)
    base = serve_in_thread(create_app(settings, embedder=LocalEmbedder()))
    with httpx.Client(base_url=base, timeout=300) as http:
        ids = seed(http, keys)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = b.new_context(viewport={"width": 1280, "height": 800}).new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{base}/ui/#/browse")
        page.get_by_label("API key").fill(keys["sam"])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector('#view[data-page="browse"][aria-busy="false"]')

        def shot(hash_: str, name: str, then=None) -> None:
            page.evaluate(GO, hash_)
            page.wait_for_selector(f'#view[data-page="{name.split("-")[0]}"][aria-busy="false"]')
            if then:
                then()
            page.screenshot(path=str(out / f"console-{name}.png"), full_page=name == "item")
            print(out / f"console-{name}.png")

        def run_search() -> None:
            page.get_by_label("Query").fill("invoice archive")
            page.get_by_role("button", name="Run").click()
            page.wait_for_selector("#results")

        def open_branch() -> None:
            page.get_by_role("button", name="refund-policy-2027").click()
            page.wait_for_selector("#diff")

        def assets() -> None:
            page.get_by_label("Type").select_option("asset")
            page.wait_for_selector("#items caption:has-text('knowledge assets')")

        def audit() -> None:
            page.get_by_role("button", name="Verify chain").click()
            page.wait_for_selector("#chain:has-text('ok: ')")
            page.evaluate("window.scrollTo(0, 0)")

        shot("#/browse", "browse")
        shot("#/browse", "browse-assets", assets)
        shot(f"#/item/memory/{ids['memory']}", "item")
        shot("#/search", "search", run_search)
        shot("#/compliance", "compliance", audit)
        shot("#/branches", "branches", open_branch)
        shot("#/jobs", "jobs")
        b.close()


if __name__ == "__main__":
    main()
