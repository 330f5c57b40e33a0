"""Issue 41, trusted proxies: forwarded headers are believed only from MEMSCALE_TRUSTED_PROXIES
(none by default), so rotating X-Forwarded-For no longer escapes the failed-key limit. The
server is a real uvicorn on loopback, configured as `memscale serve` configures it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from bench.common import free_port

BAD_KEY = {"Authorization": "Bearer msk_not-a-key"}


@contextmanager
def _served(app, **options) -> Iterator[str]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _codes(url: str, forwarded_for: list[str]) -> list[int]:
    with httpx.Client(base_url=url, timeout=30) as c:
        return [c.get(f"/v1/jobs/{uuid.uuid4()}", headers={**BAD_KEY, "X-Forwarded-For": ip}).status_code for ip in forwarded_for]


@pytest.fixture
def make_app(settings, embedder):
    from app.main import create_app

    return lambda **update: create_app(settings.model_copy(update={"auth_failures_per_minute": 3, **update}), embedder=embedder)


def test_rotating_x_forwarded_for_still_hits_the_failed_key_limit_by_default(make_app):
    from app.kit.http.limits import proxy_options

    rotating = [f"203.0.113.{i}" for i in range(6)]
    # What `memscale serve` ran before: uvicorn's defaults, which trust forwarded headers from
    # loopback, so every rotated address got a fresh budget and the limit never bit.
    with _served(make_app()) as url:
        assert 429 not in _codes(url, rotating)
    # The default now (no trusted proxies): the connection's own address is counted.
    with _served(make_app(), **proxy_options([])) as url:
        assert _codes(url, rotating) == [401, 401, 401, 429, 429, 429]


def test_a_listed_proxys_forwarded_address_is_the_client(make_app):
    from app.kit.http.limits import proxy_options

    with _served(make_app(trusted_proxies=["127.0.0.0/8"]), **proxy_options(["127.0.0.0/8"])) as url:
        assert _codes(url, [f"203.0.113.{i}" for i in range(6)]) == [401] * 6  # six clients, one failure each
        assert _codes(url, ["198.51.100.7"] * 4) == [401, 401, 401, 429]  # one client, over its budget
        assert _codes(url, ["198.51.100.8"]) == [401]  # another client behind the proxy is not blocked
        # A chain: the client is the right-most address that is not itself a trusted proxy.
        assert _codes(url, ["198.51.100.7, 127.0.0.5"]) == [429]


def test_trusted_proxies_setting_takes_addresses_and_networks_only(monkeypatch):
    from pydantic import ValidationError

    from app.config import Settings

    assert Settings().trusted_proxies == []
    monkeypatch.setenv("MEMSCALE_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.5")
    assert Settings().trusted_proxies == ["10.0.0.0/8", "192.168.1.5/32"]
    monkeypatch.setenv("MEMSCALE_TRUSTED_PROXIES", '["::1"]')
    assert Settings().trusted_proxies == ["::1/128"]
    for bad in ("*", "proxy.internal", "10.0.0.0/33"):
        monkeypatch.setenv("MEMSCALE_TRUSTED_PROXIES", bad)
        with pytest.raises(ValidationError, match="not an IP address or CIDR"):
            Settings()
