"""The console: a page, its ES modules and one stylesheet, served as files. Every page reads
through the public REST API with the user's own key (kept in the tab's sessionStorage), so it can
show nothing the API would not. The script and styles are files of this router, so the CSP allows
them from this origin only: no inline script or style, nothing fetched from elsewhere."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.kit.errors import NotFound

router = APIRouter(tags=["ui"], include_in_schema=False)
HERE = Path(__file__).parent
PAGE = HERE / "index.html"
JS = "text/javascript; charset=utf-8"
# The only files served: a fixed table of names, never a path taken from the request.
ASSETS = {
    "console.css": "text/css; charset=utf-8",
    **{f"{m}.js": JS for m in ("main", "api", "dom", "graph", "browse", "item", "playground", "compliance", "branches", "jobs")},
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


@router.get("/ui")
def ui_redirect():
    return RedirectResponse("/ui/")


@router.get("/ui/", response_class=HTMLResponse)
def ui():
    return HTMLResponse(PAGE.read_text(), headers=HEADERS)


@router.get("/ui/{name}", response_class=Response)
def ui_asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound("no such console file")
    return Response((HERE / name).read_bytes(), media_type=ASSETS[name], headers=HEADERS)
