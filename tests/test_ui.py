"""The console's static files: a CSP without 'unsafe-inline', scripts and styles only as files of
the same router, nothing served but the fixed list, and no markup-parsing sink in any script
(tests/test_console.py drives the pages in a real browser)."""

from __future__ import annotations

import re

from app.ui.endpoints import ASSETS, HERE


def test_the_page_allows_no_inline_script_or_style(client):
    page = client.get("/ui/")
    csp = page.headers["content-security-policy"]
    assert page.status_code == 200 and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert directives["connect-src"] == "'self'"  # the pages call this origin's API only
    html = page.text
    # Nothing inline for the CSP to have to allow: scripts only by src, no <style>, no style=, no on*=.
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/ui/main.js">']
    assert "<style" not in html and "style=" not in html and not re.search(r"\son\w+=", html)
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"


def test_every_console_file_is_served_and_nothing_else(client):
    on_disk = {p.name for p in HERE.iterdir() if p.suffix in (".js", ".css")}
    assert set(ASSETS) == on_disk
    for name in ASSETS:
        r = client.get(f"/ui/{name}")
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind) and r.text
        assert r.headers["x-content-type-options"] == "nosniff" and "unsafe-inline" not in r.headers["content-security-policy"]
    for bad in ("endpoints.py", "..%2Fendpoints.py", "index.html", "missing.js", "%2e%2e%2f__init__.py"):
        r = client.get(f"/ui/{bad}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", bad


def test_no_script_parses_markup_or_reaches_another_origin():
    """Every value becomes a text node (dom.js `h`, graph.js `el`): no innerHTML-like sink, no
    eval, no fetch but to this origin's paths; and each module stays small."""
    for p in HERE.glob("*.js"):
        src = p.read_text()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            'setAttribute("on',
            "javascript:",
            "http://",
            "https://",
        ):
            assert sink not in src.replace('"http://www.w3.org/2000/svg"', ""), (p.name, sink)
        assert len(src.splitlines()) < 400, p.name
        assert re.findall(r"fetch\(([^,)]+)", src) in ([], ["path + query(params"], ['"/openapi.json"']), p.name
