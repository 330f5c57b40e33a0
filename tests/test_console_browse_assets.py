"""The memory browser's knowledge-asset list and its as-of episodes, in headless Chromium (the
harness of tests/test_console.py): two users of one org and a user of another org each see exactly
the ids GET /v1/knowledge/assets and GET /v1/episodes?as_of= give their key, and stored markup in
an asset's title and source shows as text."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.console_browser import CHROMIUM, XSS, pages
from tests.helpers import ep
from tests.test_console_assets import asset

pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (pyproject.toml)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by `make browser` (apt)")
OLD, THEN = "2026-01-01T00:00:00+00:00", "2026-03-01T00:00:00"  # a stored row's instant; the picker's (months apart: any zone)


@pytest.fixture(scope="module")
def assets_world(admin_engine, settings, client):
    from tests.conftest import World

    w = World(admin_engine, settings.audit_secret())
    a, b = w.org(), w.org()
    alice, bob = w.user(a, groups=["ops"]), w.user(a, groups=["ops"])
    eve = w.user(b, roles=["admin"])
    asset(admin_engine, alice, title=f"runbook {XSS}")
    asset(admin_engine, alice, kind="table_schema", visibility="group", groups=["ops"], at=OLD)
    asset(admin_engine, bob, kind="glossary", visibility="org", title="terms")
    asset(admin_engine, eve, visibility="org", title="eve's wiki")
    old = client.post("/v1/episodes", json=ep("stored long ago", visibility="org"), headers=alice.h).json()["id"]
    client.post("/v1/episodes", json=ep("stored today", visibility="org"), headers=alice.h)
    client.post("/v1/episodes", json=ep("eve's episode", visibility="org"), headers=eve.h)
    with admin_engine.begin() as c:
        c.execute(
            text("UPDATE episodes SET created_at = :t WHERE org_id = :o AND id = :i"), {"t": OLD, "o": alice.org_id, "i": old}
        )
    return {"alice": alice, "bob": bob, "eve": eve}


def test_asset_list_shows_each_key_what_the_api_gives_it(tab, client, assets_world):
    for name in ("alice", "bob", "eve"):
        who = assets_world[name]
        t = tab(who)
        t.page.get_by_label("Type").select_option("asset")
        t.page.wait_for_selector("#items caption:has-text('knowledge assets')")
        want = [x["id"] for x in pages(client, "/v1/knowledge/assets", who)]
        assert t.ids("items") == want and want, name
        if name == "alice":
            assert f"runbook {XSS}" in t.page.inner_text("#items")  # the title, as the characters stored
            t.page.get_by_label("Kind").select_option("table_schema")
            t.page.get_by_role("button", name="Filter").click()
            t.page.wait_for_selector("#items[data-count='1']")
            assert t.ids("items") == [x["id"] for x in pages(client, "/v1/knowledge/assets", who, kind="table_schema")]
            t.shot("assets")
        t.safe()


def test_as_of_reaches_the_episode_and_asset_lists(tab, client, assets_world):
    for name in ("alice", "bob", "eve"):
        who = assets_world[name]
        t = tab(who)
        t.page.get_by_label("As of").fill(THEN)
        t.page.get_by_role("button", name="Apply").click()
        t.wait("browse")
        t.page.get_by_label("Type").select_option("episode")
        t.page.wait_for_selector("#items caption:has-text('episodes')")
        as_of = t.page.evaluate("new Date(sessionStorage.getItem('memscale.as_of')).toISOString()")
        want = [e["id"] for e in pages(client, "/v1/episodes", who, as_of=as_of)]
        assert t.ids("items") == want and len(want) == (1 if name != "eve" else 0), name
        t.page.get_by_label("Type").select_option("asset")
        t.page.wait_for_selector("#items caption:has-text('knowledge assets')")
        want = [x["id"] for x in pages(client, "/v1/knowledge/assets", who, as_of=as_of)]
        assert t.ids("items") == want and len(want) == (1 if name != "eve" else 0), name
        t.safe()
