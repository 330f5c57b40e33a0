"""The compliance page: static files (page, script, styles); it calls the same REST API with the
user's own key. The script and styles are files of their own, served here, so the page's CSP
allows them from this origin only: no inline script or style, nothing from elsewhere."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

router = APIRouter(tags=["ui"], include_in_schema=False)
HERE = Path(__file__).parent
PAGE = HERE / "lineage.html"
# The only files served: fixed names, never a path from the request.
ASSETS = {"lineage.js": "text/javascript; charset=utf-8", "lineage.css": "text/css; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
           "X-Content-Type-Options": "nosniff"}


@router.get("/ui")
def ui_redirect():
    return RedirectResponse("/ui/")


@router.get("/ui/", response_class=HTMLResponse)
def ui():
    return HTMLResponse(PAGE.read_text(), headers=HEADERS)


@router.get("/ui/lineage.js", response_class=PlainTextResponse)
def ui_script():
    return _asset("lineage.js")


@router.get("/ui/lineage.css", response_class=PlainTextResponse)
def ui_styles():
    return _asset("lineage.css")


def _asset(name: str) -> Response:
    return Response((HERE / name).read_bytes(), media_type=ASSETS[name], headers=HEADERS)
