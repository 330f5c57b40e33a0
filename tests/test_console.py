"""The console (/ui/) in a real headless Chromium driven through Playwright, as a person would:
sign in with a key, open each page, read what it shows. Per page, two users of one org and one
user of another org each see exactly what the API gives their key; stored content written as
markup shows as text (no element is made of it, no script runs); a screenshot of each page goes
to a temporary folder."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from tests.conftest import World
from tests.console_browser import CHROMIUM, START, XSS, pages
from tests.helpers import ep

pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (pyproject.toml)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by `make browser` (apt)")


@pytest.fixture(scope="module")
def seeded(admin_engine, settings, client):
    """Org A: alice (member, group ops), bob (steward and auditor, group ops); org B: eve (admin).
    Every free-text field that the pages render holds markup."""
    w = World(admin_engine, settings.audit_secret())
    a, b = w.org(), w.org()
    alice, bob = w.user(a, groups=["ops"]), w.user(a, roles=["steward", "auditor"], groups=["ops"])
    eve = w.user(b, roles=["admin"])
    post = lambda path, body, who, **kw: client.post(path, json=body, headers=who.h, **kw)  # noqa: E731
    e1 = post("/v1/episodes", ep(f"invoice archive policy {XSS}", visibility="org"), alice).json()["id"]
    m1 = post(
        "/v1/memories",
        {"text": f"invoices are archived after 7 years {XSS}", "kind": "rule", "sources": [{"type": "episode", "id": e1}]},
        alice,
    ).json()["id"]
    m2 = post(
        "/v1/memories",
        {"text": "ops rotate the invoice bucket keys monthly", "kind": "procedure", "visibility": "group", "groups": ["ops"]},
        alice,
    ).json()["id"]
    m3 = post("/v1/memories", {"text": "bob's org-wide note on invoices", "kind": "fact", "visibility": "org"}, bob).json()["id"]
    post("/v1/memories", {"text": "eve's invoices live elsewhere", "kind": "fact", "visibility": "org"}, eve)
    post(f"/v1/memories/{m3}/declassify", {"visibility": "org", "reason": f"reviewed {XSS}"}, bob)
    post("/v1/branches", {"name": "trial"}, bob)
    client.post(
        "/v1/memories",
        json={"text": f"branch-only rule {XSS}", "kind": "rule", "visibility": "org"},
        headers={**bob.h, "Memscale-Branch": "trial"},
    )
    post("/v1/jobs", {"kind": "distill"}, bob)
    post("/v1/jobs", {"kind": "consolidate"}, eve)
    post("/v1/context", {"query": "warm up", "budget_tokens": 300}, eve)  # loads the token counter once, here
    return {"alice": alice, "bob": bob, "eve": eve, "e1": e1, "m1": m1, "m2": m2, "m3": m3}


def test_memory_browser_shows_each_key_what_the_api_gives_it(tab, client, seeded):
    s = seeded
    for name in ("alice", "bob", "eve"):
        who = s[name]
        t = tab(who)
        assert t.ids("items") == [m["id"] for m in pages(client, "/v1/memories", who)], name
        t.page.get_by_label("Type").select_option("episode")
        t.wait("browse")
        t.page.wait_for_selector("#items caption:has-text('episodes')")
        assert t.ids("items") == [e["id"] for e in pages(client, "/v1/episodes", who)], name
        t.safe()
    # alice's rule, and her episode, read as the characters stored (markup and all).
    t = tab(s["alice"])
    assert t.page.locator("#items").inner_text().count("invoices are archived after 7 years <img src=x") == 1
    t.page.get_by_label("Kind").select_option("rule")
    t.page.get_by_role("button", name="Filter").click()
    t.page.wait_for_selector("#items[data-count='1']")
    assert t.ids("items") == [s["m1"]]
    t.safe()
    t.shot("browse")


def test_paging_follows_the_cursor(tab, client, seeded):
    t = tab(seeded["alice"])
    t.page.get_by_label("Per page").select_option("25")
    want = [m["id"] for m in pages(client, "/v1/memories", seeded["alice"], limit=25)]
    t.page.get_by_role("button", name="Filter").click()
    t.wait("browse")
    assert t.ids("items") == want[:25] and t.page.get_by_role("button", name="Next page").is_disabled() == (len(want) <= 25)


def test_item_page_folds_in_the_lineage_and_hides_what_the_key_may_not_see(tab, client, seeded):
    s = seeded
    t = tab(s["alice"])
    t.go(f"#/item/memory/{s['m1']}", "item")
    assert t.page.inner_text("#item-text") == client.get(f"/v1/memories/{s['m1']}", headers=s["alice"].h).json()["text"]
    t.page.wait_for_selector("#graph[data-nodes='2'][data-edges='1']")
    assert t.ids("sources") == [s["e1"]]
    t.page.locator(f'#graph .node[data-id="{s["e1"]}"]').focus()
    t.page.keyboard.press("Enter")  # keyboard: a node opens with Enter
    t.page.wait_for_selector("#node-detail:has-text('invoice archive policy <img')")
    t.safe()
    t.shot("item")
    t.go(f"#/item/episode/{s['e1']}", "item")
    assert t.ids("derived") == [s["m1"]]
    # bob (same org, not the owner) and eve (another org): the private memory is a 404 in the page too.
    for who in (s["bob"], s["eve"]):
        t = tab(who)
        t.go(f"#/item/memory/{s['m1']}", "item")
        assert "404 not_found" in t.page.inner_text("#view")
        assert client.get(f"/v1/memories/{s['m1']}", headers=who.h).status_code == 404


def test_item_page_lists_the_versions_the_key_may_see(tab, client, seeded):
    s = seeded
    for name in ("alice", "bob", "eve"):
        who = s[name]
        r = client.get(f"/v1/memories/{s['m3']}/versions", headers=who.h)
        t = tab(who)
        t.go(f"#/item/memory/{s['m3']}", "item")
        if r.status_code == 404:  # another org: no page, no versions
            assert name == "eve" and t.page.locator("#versions").count() == 0
            continue
        want = [m["id"] for m in r.json()["items"]]
        assert len(want) == 2 and t.ids("versions") == want, name
        # every other version is a link to its own item page; this one is not
        links = t.page.eval_on_selector_all("#versions a", "as => as.map(a => a.getAttribute('href'))")
        assert links == [f"#/item/memory/{want[0]}"]
        t.safe()
    t = tab(s["alice"])  # stored markup in a version's text stays text
    t.go(f"#/item/memory/{s['m1']}", "item")
    api = client.get(f"/v1/memories/{s['m1']}/versions", headers=s["alice"].h).json()["items"]
    assert t.ids("versions") == [m["id"] for m in api] and "archived after 7 years <img src=x" in t.page.inner_text("#versions")
    t.safe()


def test_playground_shows_why_each_result_ranked_and_the_budgeted_context(tab, client, seeded):
    s = seeded
    for name in ("alice", "bob", "eve"):
        who = s[name]
        t = tab(who)
        t.go("#/search", "search")
        t.page.get_by_label("Query").fill("invoice archive")
        t.page.get_by_label("Context budget (tokens)").fill("300")
        t.page.get_by_role("button", name="Run").click()
        t.page.wait_for_selector("#results")
        assert t.page.locator("#results").count() == 1, (t.page.inner_text("#view"), t.errors)
        api = client.post("/v1/search", json={"query": "invoice archive", "k": 10, "mode": "hybrid"}, headers=who.h).json()
        assert t.ids("results") == [r["id"] for r in api["results"]], name
        shares = t.page.eval_on_selector_all(
            "#results tbody tr:first-child table.explain tr",
            "rs => rs.map(r => [r.dataset.signal, r.cells[1].textContent, r.cells[2].textContent])",
        )
        signal_shares = [float(p.rstrip("%")) for n, p, _ in shares if n not in ("logistic", "rounding") and p]
        if api["results"] and signal_shares:
            assert sum(signal_shares) == pytest.approx(100, abs=0.2)
        ctx = client.post("/v1/context", json={"query": "invoice archive", "budget_tokens": 300}, headers=who.h).json()
        assert t.page.inner_text("#context-text") == ctx["text"].strip() or t.page.text_content("#context-text") == ctx["text"]
        assert f"{ctx['tokens']} of 300 tokens" in t.page.inner_text("#view")
        t.safe()
        if api["results"]:  # the page shows the server's own explanation of the first result
            first = client.post(
                "/v1/search", json={"query": "invoice archive", "k": 10, "mode": "hybrid", "explain": True}, headers=who.h
            ).json()["results"][0]["explain"]["signals"]
            assert {n: float(c) for n, _, c in shares} == pytest.approx({n: round(c, 4) for n, c in first.items()}, abs=1e-4)
            assert shares[-1][0] == "logistic" and sum(first.values()) == pytest.approx(api["results"][0]["score"], abs=1e-9)
        if name == "alice":
            assert "<img src=x" in t.page.inner_text("#results")
            t.shot("search")


def test_compliance_page_shows_the_audit_log_to_auditors_only(tab, client, seeded):
    s = seeded
    t = tab(s["alice"])  # a member: the API refuses her the audit log, and the page says so
    t.go("#/compliance", "compliance")
    assert "needs the auditor or admin role" in t.page.inner_text("#view") and t.page.locator("#audit").count() == 0
    assert client.get("/v1/audit", headers=s["alice"].h).status_code == 403
    for who in (s["bob"], s["eve"]):
        t = tab(who)
        t.go("#/compliance", "compliance")
        api = client.get("/v1/audit", params={"limit": 100}, headers=who.h).json()["events"]
        assert t.ids("audit") == [str(e["seq"]) for e in api]
        t.page.get_by_role("button", name="Verify chain").click()
        t.page.wait_for_selector("#chain:has-text('ok: ')")
        head = client.post("/v1/audit/verify", headers=who.h).json()["head_seq"]
        assert t.page.inner_text("#chain") == f"ok: {head} events checked, every hash, link and seal holds"
        t.safe()
    t = tab(s["bob"])
    t.go("#/compliance", "compliance")
    t.page.get_by_role("button", name="Declassifications").click()
    t.page.wait_for_selector("#audit caption:has-text('(1 events)')")
    assert "reviewed <img src=x" in t.page.inner_text("#audit")  # the reason, as text
    t.safe()
    t.shot("compliance")


def test_verify_chain_shows_the_services_check_of_the_callers_chain(tab, client, world, admin_engine):
    """An edited event whose links still hold (only its details changed) is found: the page shows
    the service's recomputed hashes, not a check of the links it loaded."""
    org, other = world.org(), world.org()
    alice, auditor, eve = world.user(org), world.user(org, roles=["auditor"]), world.user(other, roles=["admin"])
    for i in range(4):
        client.post("/v1/episodes", json={"kind": "note", "content": f"note {i}"}, headers=alice.h)
    with admin_engine.begin() as c:  # a superuser past the append-only trigger
        c.execute(text("SET LOCAL session_replication_role = replica"))
        c.execute(text("UPDATE audit_log SET details = '{\"count\": 99}' WHERE org_id = :o AND seq = 3"), {"o": alice.org_id})
    t = tab(auditor)
    t.go("#/compliance", "compliance")
    t.page.get_by_role("button", name="Verify chain").click()
    t.page.wait_for_selector("#chain:has-text('broken')")
    assert t.page.inner_text("#chain") == "broken at seq 3: hash does not match the event's fields (3 events checked)"
    t = tab(eve)  # another org's chain is its own, and whole
    t.go("#/compliance", "compliance")
    t.page.get_by_label("Checkpoint (JSON)").fill("{not json")
    t.page.get_by_role("button", name="Verify chain").click()
    assert t.page.inner_text("#chain") == "the checkpoint is not a JSON line"
    t.page.get_by_label("Checkpoint (JSON)").fill("")
    t.page.get_by_role("button", name="Verify chain").click()
    t.page.wait_for_selector("#chain:has-text('ok: ')")
    assert "broken" not in t.page.inner_text("#chain")


def test_retention_rules_show_what_the_next_run_removes(tab, client, seeded, admin_engine):
    s = seeded
    with admin_engine.begin() as c:
        c.execute(
            text("UPDATE orgs SET settings = CAST(:s AS jsonb) WHERE id = :o"),
            {"s": json.dumps({"retention": {"episode": 3650}}), "o": s["alice"].org_id},
        )
    for name in ("alice", "bob", "eve"):
        who = s[name]
        r = client.get("/v1/retention", headers=who.h)
        t = tab(who)
        t.go("#/compliance", "compliance")
        if r.status_code == 403:  # a member: the page says so, and shows no rules
            assert name == "alice" and "Retention rules need the steward" in t.page.inner_text("#view")
            assert t.page.locator("#retention-rules").count() == 0
        elif not r.json()["rules"]:
            assert name == "eve" and "No retention rules" in t.page.inner_text("#view")
        else:
            rules = r.json()["rules"]
            assert t.ids("retention-rules") == [x["item_type"] for x in rules] == ["episode"]
            cells = t.page.eval_on_selector_all("#retention-rules tbody td", "ts => ts.map(t => t.textContent)")
            assert cells[1] == "3650" and cells[3] == str(rules[0]["due"])
        t.safe()


def test_erasure_requests_list_what_was_removed(tab, client, seeded, world):
    s = seeded
    gone = world.user(s["alice"].org)
    client.post("/v1/memories", json={"text": "soon forgotten", "kind": "fact"}, headers=gone.h)
    job = client.delete(f"/v1/users/{gone.user_id}/data", headers=gone.h).json()["job_id"]
    t = tab(s["bob"])
    t.go("#/compliance", "compliance")
    assert t.ids("erasures") == [j["id"] for j in pages(client, "/v1/jobs", s["bob"], kind="forget_user")]
    assert job in t.ids("erasures") and "memories_removed: 1" in t.page.inner_text("#erasures")
    for who in (s["alice"], s["eve"]):  # a member lists her own requests only; another org, none of these
        t = tab(who)
        t.go("#/compliance", "compliance")
        want = [j["id"] for j in pages(client, "/v1/jobs", who, kind="forget_user")]
        assert job not in t.ids("erasures") and t.ids("erasures") == want


def test_branches_page_lists_diffs_and_switches_the_console_into_a_branch(tab, client, seeded):
    s = seeded
    for who in (s["alice"], s["bob"], s["eve"]):
        t = tab(who)
        t.go("#/branches", "branches")
        assert t.ids("branches") == [b["name"] for b in client.get("/v1/branches", headers=who.h).json()["branches"]]
    t = tab(s["bob"])
    t.go("#/branches", "branches")
    t.page.get_by_role("button", name="trial").click()
    t.page.wait_for_selector("#diff")
    diff = client.get("/v1/branches/trial/diff", headers=s["bob"].h).json()["changes"]
    assert t.ids("diff") == [c["id"] for c in diff] and "branch-only rule <img" in t.page.inner_text("#diff")
    t.safe()
    t.shot("branches")
    # Working in the branch: the memory browser lists the branch's memories, as the API does with the header.
    t.page.get_by_role("button", name="Work in it").click()
    t.go("#/browse", "browse")
    in_branch = client.get("/v1/memories", headers={**s["bob"].h, "Memscale-Branch": "trial"}).json()["items"]
    assert t.ids("items") == [m["id"] for m in in_branch] and "branch-only rule <img" in t.page.inner_text("#items")
    # As of before anything was written: no memory then.
    t.page.get_by_label("As of").fill("2020-01-01T00:00:00")
    t.page.get_by_role("button", name="Apply").click()
    t.page.wait_for_selector("#items[data-count='0']")


def test_jobs_page_lists_the_keys_jobs_and_the_kinds_the_api_accepts(tab, client, seeded):
    s = seeded
    kinds = client.get("/openapi.json").json()["components"]["schemas"]["JobIn"]["properties"]["kind"]["enum"]
    offered = {"alice": [], "bob": [k for k in kinds if k != "reembed"], "eve": kinds}  # member, steward, admin
    for name, t in ((n, tab(s[n])) for n in ("alice", "bob", "eve")):
        t.go("#/jobs", "jobs")
        assert t.ids("jobs") == [j["id"] for j in pages(client, "/v1/jobs", s[name])]
        assert t.page.eval_on_selector_all(f"{START} option", "os => os.map(o => o.value)") == offered[name], name
    t = tab(s["bob"])
    t.go("#/jobs", "jobs")
    before = len(t.ids("jobs"))
    t.page.get_by_label("Kind", exact=True).first.select_option("consolidate")
    t.page.get_by_role("button", name="Start").click()
    t.page.wait_for_selector(f"#jobs > tbody > tr:nth-child({before + 1})")
    assert t.ids("jobs") == [j["id"] for j in pages(client, "/v1/jobs", s["bob"])] and len(t.ids("jobs")) == before + 1
    t.shot("jobs")


def test_a_slow_render_never_overrides_the_page_asked_for_after_it(tab, seeded):
    """Two renders in flight (the branches page, its list slowed, then the jobs page): the view
    shows the page asked for last, although the earlier render ends after it."""
    t = tab(seeded["bob"])
    t.go("#/browse", "browse")

    t.page.evaluate(  # the branch list answers 2.5 s late
        "const f = window.fetch; window.fetch = (u, o) => String(u).endsWith('/v1/branches')"
        " ? new Promise((r) => setTimeout(r, 2500)).then(() => f(u, o)) : f(u, o);"
    )
    t.page.evaluate("location.hash = '#/branches'")
    t.page.wait_for_timeout(300)
    t.page.evaluate("location.hash = '#/jobs'")
    t.page.wait_for_timeout(5000)  # the branches render has ended by now
    assert t.page.get_attribute("#view", "data-page") == "jobs" and t.page.locator("#jobs").count() == 1
    assert t.page.locator("#branches").count() == 0
