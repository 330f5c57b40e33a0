"""The compliance page: one static file; it calls the same REST API with the user's own key."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse

router = APIRouter(tags=["ui"], include_in_schema=False)
PAGE = Path(__file__).with_name("lineage.html")


@router.get("/ui")
def ui_redirect():
    return RedirectResponse("/ui/")


@router.get("/ui/", response_class=HTMLResponse)
def ui():
    return HTMLResponse(PAGE.read_text(), headers={
        "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                   "connect-src 'self'; img-src 'self'",
        "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"})
