"""The console tests' browser: one headless Chromium per test module (through Playwright), a
server of the module's own, and signed-in tabs. Registered by `pytest_plugins` in tests/conftest.py, so
the console modules share the fixtures without importing them (an imported fixture named as a test's
argument reads to ruff as a redefinition)."""

from __future__ import annotations

import shutil

import pytest

from bench.common import serve_in_thread
from bench.tools.console_screens import GO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
START = "form[aria-label='start a job'] select[name=kind]"  # the jobs page's start control


@pytest.fixture(scope="module")
def base_url(settings, embedder):
    """A server of its own (with its own start-up), on the test database the `client` writes to."""
    from app.main import create_app

    return serve_in_thread(create_app(settings, embedder=embedder))


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (pyproject.toml)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def pages(client, path: str, who, **params) -> list[dict]:
    """Every item a list endpoint gives `who`, following next_cursor."""
    items, cursor = [], None
    while True:
        r = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})}, headers=who.h).json()
        items += r["items"]
        if not (cursor := r["next_cursor"]):
            return items


class Tab:
    """One signed-in browser tab; fails on any dialog, console error from a blocked script, or XSS flag."""

    def __init__(self, browser, base_url: str, who, shots):
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 860})
        self.ctx.set_default_timeout(60_000)  # two cores shared by the whole suite
        self.page, self.base, self.shots, self.dialogs = self.ctx.new_page(), base_url, shots, []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(f"{base_url}/ui/#/browse")
        self.page.get_by_label("API key").fill(who.key)
        self.page.get_by_role("button", name="Sign in").click()
        self.wait("browse")

    def wait(self, name: str) -> None:
        self.page.wait_for_selector(f'#view[data-page="{name}"][aria-busy="false"]')

    def go(self, hash_: str, name: str) -> None:
        self.page.evaluate(GO, hash_)
        self.wait(name)

    def ids(self, table: str) -> list[str]:
        return self.page.eval_on_selector_all(f"#{table} > tbody > tr", "rs => rs.map(r => r.dataset.id)")

    def safe(self) -> None:
        """Markup in stored content stayed text: no element made of it, nothing ran."""
        assert self.page.evaluate("window.__pwned") is None and self.dialogs == [] and self.errors == []
        assert self.page.locator("#view img, #view script").count() == 0

    def shot(self, name: str) -> None:
        path = self.shots / f"console-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture
def tab(browser, base_url, tmp_path):
    opened = []

    def open_(who):
        opened.append(Tab(browser, base_url, who, tmp_path))
        return opened[-1]

    yield open_
    for t in opened:
        t.close()
