"""The admin CLI prints only what it names, on one line, and the key it prints works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _cli(settings, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    return subprocess.run([sys.executable, "-m", "app", *args], env=env, capture_output=True, text=True, timeout=120)


def test_admin_cli_round_trip(settings, client):
    org = f"cli-{uuid.uuid4().hex[:6]}"
    r = _cli(settings, "admin", "create-org", org)
    assert r.returncode == 0, r.stderr
    assert UUID_RE.match(r.stdout.strip()) and r.stdout.count("\n") == 1 and r.stderr == ""
    r = _cli(settings, "admin", "create-user", "--org", org, "carol", "--role", "steward", "--group", "ops", "--clearance", "pii")
    assert r.returncode == 0 and UUID_RE.match(r.stdout.strip())
    r = _cli(settings, "admin", "create-key", "--org", org, "--user", "carol")
    key = r.stdout.strip()
    assert r.returncode == 0 and key.startswith("msk_") and r.stdout.count("\n") == 1
    resp = client.post(
        "/v1/episodes",
        json={"kind": "note", "content": "hello", "visibility": "group", "groups": ["ops"], "labels": ["pii"]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert resp.status_code == 201


def test_cli_prints_nothing_it_does_not_mean_to(settings):
    """Help and audit commands: their output on stdout, and no library warning on stderr (a
    platformdirs RuntimeDirWarning used to come with every command)."""
    org = f"cli-{uuid.uuid4().hex[:6]}"
    assert _cli(settings, "admin", "create-org", org).returncode == 0
    for args in (("--help",), ("db", "--help"), ("admin", "--help"), ("audit", "verify", "--org", org)):
        r = _cli(settings, *args)
        assert (r.returncode, r.stderr) == (0, ""), args
        assert r.stdout.strip(), args


def test_admin_cli_errors_are_clear(settings):
    org = f"cli-{uuid.uuid4().hex[:6]}"
    assert _cli(settings, "admin", "create-org", org).returncode == 0
    dup = _cli(settings, "admin", "create-org", org)
    assert dup.returncode == 2 and "already exists" in dup.stderr and dup.stdout == ""
    missing = _cli(settings, "admin", "create-key", "--org", org, "--user", "nobody")
    assert missing.returncode == 2 and "no user" in missing.stderr


def test_export_trajectories(settings, client, world):
    import json

    org = world.org()
    bob = world.user(org)
    sid = client.post("/v1/sessions", json={}, headers=bob.h).json()["id"]
    client.post(f"/v1/sessions/{sid}/tools/memory_add", json={"text": "Bob likes PDFs", "kind": "preference"}, headers=bob.h)
    client.post(f"/v1/sessions/{sid}/outcome", json={"outcome": "success", "reward": 0.5}, headers=bob.h)
    r = _cli(settings, "export", "trajectories", "--org", org)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 1 and lines[0]["session_id"] == sid and lines[0]["reward"] == 0.5
    assert lines[0]["steps"][0]["tool"] == "memory_add" and "Bob likes PDFs" not in json.dumps(lines[0]["steps"][0]["result"])


def test_branch_cli_round_trip(settings, client, world):
    """`memscale branch create|list|diff|promote|drop` act as a user of the org, under its rules."""
    import json

    org = world.org()
    steward = world.user(org, "stew", roles=("steward",))
    member = world.user(org, "mem")
    r = _cli(settings, "branch", "create", "trial", "--org", org)  # acts as the org's first steward
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "trial"
    m = client.post(
        "/v1/memories",
        json={"text": "cli branch memory", "kind": "fact", "visibility": "org"},
        headers={**steward.h, "Memscale-Branch": "trial"},
    ).json()
    assert [b["name"] for b in json.loads(_cli(settings, "branch", "list", "--org", org).stdout)] == ["trial"]
    diff = json.loads(_cli(settings, "branch", "diff", "trial", "--org", org).stdout)
    assert [(c["change"], c["id"]) for c in diff] == [("created", m["id"])]
    assert _cli(settings, "branch", "drop", "trial", "--org", org, "--user", member.name).returncode == 2  # 403
    r = _cli(settings, "branch", "promote", "trial", m["id"], "--org", org, "--user", steward.name)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["change"] == "created"
    assert _cli(settings, "branch", "drop", "trial", "--org", org).returncode == 0
    assert _cli(settings, "branch", "drop", "trial", "--org", org).returncode == 2  # gone


def test_serve_prepares_the_bundled_model_before_listening(settings, tmp_path, monkeypatch):
    """`memscale serve` converts the bundled model before its first request (a fresh data dir's
    first /v1/context took ~55 s converting it); a configured provider model converts nothing."""
    import app.kit.runtime.localmodel as localmodel
    from app.cli import _prepare_local_model

    calls = []
    monkeypatch.setattr(localmodel, "local_model_dir", lambda d: calls.append(d))
    _prepare_local_model(settings.model_copy(update={"llm_model": "openai/gpt-4o-mini", "data_dir": tmp_path}))
    assert calls == []
    _prepare_local_model(settings.model_copy(update={"llm_model": "local/smollm2", "data_dir": tmp_path}))
    assert calls == [tmp_path]
