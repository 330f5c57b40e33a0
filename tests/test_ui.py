"""The compliance page in a real headless Chromium: it loads a seeded item's lineage graph, under
a CSP without 'unsafe-inline' (issue 41): the script and styles are files of the same router."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest

from bench.common import serve_in_thread
from tests.helpers import ep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--virtual-time-budget=10000"]


@pytest.fixture(scope="module")
def base_url(app, client):
    return serve_in_thread(app)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by `make test` (apt); not found on PATH")
def test_lineage_page_renders_the_graph(base_url, client, world, tmp_path):
    org = world.org()
    alice = world.user(org)
    e1 = client.post("/v1/episodes", json=ep("I always archive invoices after 7 years", visibility="org"), headers=alice.h).json()["id"]
    before_memory = datetime.now(timezone.utc).isoformat()
    e2 = client.post("/v1/episodes", json=ep("Archive invoices in the cold bucket"), headers=alice.h).json()["id"]
    m = client.post("/v1/memories", json={"text": "Invoices are archived to the cold bucket after 7 years", "kind": "rule",
                                          "sources": [{"type": "episode", "id": e1}, {"type": "episode", "id": e2}]},
                    headers=alice.h).json()["id"]
    client.post("/v1/search", json={"query": "archive invoices"}, headers=alice.h)
    url = f"{base_url}/ui/#key={alice.key}&type=memory&id={m}"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'data-nodes="3"' in dom and 'data-edges="2"' in dom, dom[-2000:]
    # The graph was drawn by the page's script under the strict CSP (the page has no inline script).
    assert '<script src="/ui/lineage.js" defer=""></script>' in dom and "<style" not in dom
    ids = set(re.findall(r'class="node" data-key="[^"]+" data-type="\w+" data-id="([0-9a-f-]+)"', dom))
    assert ids == {m, e1, e2}
    assert re.search(rf'data-id="{m}" data-visibility="private"', dom) and re.search(rf'data-id="{e1}" data-visibility="org"', dom)
    assert dom.count(">distilled_from<") == 2
    # As of before the memory was derived, the episode had no lineage yet (the page's as-of view).
    url_then = f"{base_url}/ui/#key={alice.key}&type=episode&id={e1}&as_of={quote(before_memory)}"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p0'}", "--dump-dom", url_then],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'data-nodes="1"' in dom and 'data-edges="0"' in dom, dom[-2000:]
    # The screenshot goes to a temporary folder (tests leave the tree as they found it); set
    # MEMSCALE_UI_SCREENSHOT=docs/ui-lineage.png to refresh the one in the docs.
    shot = Path(os.environ.get("MEMSCALE_UI_SCREENSHOT") or tmp_path / "ui-lineage.png")
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p2'}", "--window-size=1280,800",
                    f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


def test_the_page_allows_no_inline_script_or_style(client):
    page = client.get("/ui/")
    csp = page.headers["content-security-policy"]
    assert page.status_code == 200 and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    html = page.text
    # Nothing inline for the CSP to have to allow: scripts only by src, no <style>, no style=, no on*=.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/ui/lineage.js" defer>']
    assert "<style" not in html and "style=" not in html and not re.search(r"\son\w+=", html)
    for path, kind in (("/ui/lineage.js", "text/javascript"), ("/ui/lineage.css", "text/css")):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind) and r.text
        assert r.headers["x-content-type-options"] == "nosniff"
    assert "innerHTML" not in client.get("/ui/lineage.js").text  # the SVG is built node by node
