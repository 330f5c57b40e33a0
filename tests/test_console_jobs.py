"""The jobs page's embedder and re-embedding, and the asset item page, in headless Chromium (the
harness of tests/test_console.py): each key sees the model GET /v1/orgs/current/embedder gives it and
a start control only for the kinds GET /v1/jobs/kinds lets it start; an admin starts a re-embedding;
a refusal forced past the page shows as the API's text; an asset's page shows exactly what
GET /v1/knowledge/assets/{id} gives the key (a 404 as text for whoever may not see it); a model name
and an asset title written as markup stay text."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.console_browser import CHROMIUM, START, XSS, pages
from tests.test_console_assets import asset

pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (pyproject.toml)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by `make browser` (apt)")
OPTIONS = f"{START} option"


@pytest.fixture(scope="module")
def jobs_world(admin_engine, settings):
    """Org A: alice (member), sam (steward), ada (admin); org B: eve (admin), whose org's model name
    and re-embedding (written by SQL: no model makes such a name) hold markup. Org B gets no writes
    while its re-embedding row stands, and both are undone at the end (a start-up checks every org's model)."""
    from tests.conftest import World

    w = World(admin_engine, settings.audit_secret())
    a, b = w.org(), w.org()
    alice, sam, ada = w.user(a), w.user(a, roles=["steward"]), w.user(a, roles=["admin"])
    eve = w.user(b, roles=["admin"])
    secret = asset(admin_engine, alice, title=f"alice's runbook {XSS}")
    shared = asset(admin_engine, sam, kind="glossary", visibility="org", title="terms", labels=[])
    eves = asset(admin_engine, eve, visibility="org", title="eve's wiki")
    with admin_engine.begin() as c:
        model = c.execute(text("SELECT model FROM org_embedders WHERE org_id = :o"), {"o": eve.org_id}).scalar_one()
        c.execute(text("UPDATE org_embedders SET model = :m WHERE org_id = :o"), {"o": eve.org_id, "m": f"model {XSS}"})
        c.execute(
            text("INSERT INTO reembeddings (org_id, model, dim, done, total) VALUES (:o, :m, 384, 7, 20)"),
            {"o": eve.org_id, "m": f"next {XSS}"},
        )
    yield {"alice": alice, "sam": sam, "ada": ada, "eve": eve, "secret": secret, "shared": shared, "eves": eves}
    with admin_engine.begin() as c:
        c.execute(text("DELETE FROM reembeddings WHERE org_id = :o"), {"o": eve.org_id})
        c.execute(text("UPDATE org_embedders SET model = :m WHERE org_id = :o"), {"o": eve.org_id, "m": model})


def _dd(t, key: str) -> str:
    return t.page.inner_text(f"#embedder dd[data-key='{key}']")


def test_jobs_page_shows_the_embedder_and_starts_only_what_the_key_may(tab, client, jobs_world):
    s = jobs_world
    kinds = client.get("/openapi.json").json()["components"]["schemas"]["JobIn"]["properties"]["kind"]["enum"]
    for name in ("alice", "sam", "ada", "eve"):
        who = s[name]
        t = tab(who)
        t.go("#/jobs", "jobs")
        e = client.get("/v1/orgs/current/embedder", headers=who.h).json()
        assert _dd(t, "model") == e["model"] and _dd(t, "dimensions") == str(e["dimensions"]), name
        may = [k["name"] for k in client.get("/v1/jobs/kinds", headers=who.h).json()["kinds"] if k["may_start"]]
        assert t.page.eval_on_selector_all(OPTIONS, "os => os.map(o => o.value)") == may, name
        if name == "eve":  # the model names as the characters stored, the run's progress as the API gives it
            assert e["model"] == f"model {XSS}" and e["reembedding"]["done"] == 7
            assert _dd(t, "target") == f"next {XSS}" and _dd(t, "done") == "7 of 20" and _dd(t, "started")
            assert t.page.get_attribute("#embedder progress", "value") == "7"
            t.shot("jobs-reembedding")
        else:
            assert t.page.locator("#embedder progress").count() == 0
        t.safe()
    assert kinds == may  # eve, an admin, may start every kind
    # A member sees the model but no start control.
    t = tab(s["alice"])
    t.go("#/jobs", "jobs")
    assert t.page.locator("form[aria-label='start a job']").count() == 0
    assert "may not start jobs" in t.page.inner_text("#view")

    # An admin starts a re-embedding from the form built from the kind's params.
    t = tab(s["ada"])
    t.go("#/jobs", "jobs")
    t.page.locator(START).select_option("reembed")
    t.page.get_by_label("Model").fill("local/e5-small")
    t.page.get_by_role("button", name="Start").click()
    t.page.wait_for_selector("#jobs > tbody > tr[data-id]")
    listed = pages(client, "/v1/jobs", s["ada"], kind="reembed")
    assert len(listed) == 1 and listed[0]["params"] == {"model": "local/e5-small"} and listed[0]["status"] == "queued"
    assert listed[0]["id"] in t.ids("jobs")
    # No worker runs here; cancelled, it is never claimed by one elsewhere.
    assert client.post(f"/v1/jobs/{listed[0]['id']}/cancel", headers=s["ada"].h).status_code == 200

    # The steward forces the admins-only kind onto the page: the API refuses, the page says so as text.
    t = tab(s["sam"])
    t.go("#/jobs", "jobs")
    before = len(pages(client, "/v1/jobs", s["sam"]))
    t.page.evaluate(
        "() => { const s = document.querySelector(\"form[aria-label='start a job'] select[name=kind]\");"
        " const o = document.createElement('option'); o.value = 'reembed'; o.textContent = 'reembed'; s.appendChild(o);"
        " s.value = 'reembed'; s.dispatchEvent(new Event('change')); }"
    )
    t.page.get_by_label("Model").fill("local/e5-small")
    t.page.get_by_role("button", name="Start").click()
    t.page.wait_for_selector("#job-started:has-text('refused')")
    assert "403" in t.page.inner_text("#job-started") and "only admins" in t.page.inner_text("#job-started")
    assert len(pages(client, "/v1/jobs", s["sam"])) == before
    t.safe()


def test_asset_item_page_shows_what_the_api_gives_each_key(tab, client, jobs_world):
    s = jobs_world
    for name in ("alice", "sam", "eve"):
        who = s[name]
        t = tab(who)
        for aid in (s["secret"], s["shared"], s["eves"]):
            t.go(f"#/item/asset/{aid}", "item")
            r = client.get(f"/v1/knowledge/assets/{aid}", headers=who.h)
            if r.status_code == 404:
                assert "404" in t.page.inner_text("#view .error") and t.page.locator("#item-text").count() == 0, (name, aid)
                continue
            x = r.json()
            assert t.page.inner_text("#item-text") == x["title"], (name, aid)
            for key in ("id", "kind", "status", "visibility", "source_uri", "chunks", "content_hash"):
                assert t.page.inner_text(f"dd[data-key='{key}']") == str(x[key]), (name, key)
            assert t.page.inner_text("dd[data-key='metadata']") == '{"pages":1}'
            if aid == s["secret"]:
                assert x["title"] == f"alice's runbook {XSS}"
                t.shot("asset")
        t.safe()
    seen = {
        n: {
            a for a in (s["secret"], s["shared"], s["eves"]) if client.get(f"/v1/knowledge/assets/{a}", headers=s[n].h).is_success
        }
        for n in ("alice", "sam", "eve")
    }
    assert seen == {"alice": {s["secret"], s["shared"]}, "sam": {s["shared"]}, "eve": {s["eves"]}}
    # From the list: an asset's id links to its page.
    t = tab(s["sam"])
    t.page.get_by_label("Type").select_option("asset")
    t.page.wait_for_selector("#items caption:has-text('knowledge assets')")
    t.page.click(f"#items tr[data-id='{s['shared']}'] a")
    t.wait("item")
    assert t.page.inner_text("#item-text") == "terms"
