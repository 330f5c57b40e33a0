"""`memscale inference serve`: the click group, and a clean exit on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from app.inference.cli import inference
from app.kit.runtime.localmodel import local_model_dir

REPO = Path(__file__).resolve().parents[2]


def test_group_and_defaults():
    assert inference.name == "inference" and "serve" in inference.commands
    serve = inference.commands["serve"]
    defaults = {p.name: p.default for p in serve.params}
    assert defaults["host"] == "127.0.0.1" and defaults["port"] == 8100
    result = CliRunner().invoke(inference, ["serve", "--help"])
    assert result.exit_code == 0 and "--port" in result.output and "--cartridge-resolver" in result.output


def test_blend_options_default_to_blendconfig(monkeypatch, tmp_path):
    """Options not given come from BlendConfig() (one place for the defaults); given ones override."""
    import uvicorn

    import app.inference.server as server
    from app.inference.blend import BlendConfig

    seen = []
    # The suite's converted model: without --model the CLI would convert the GGUF again into
    # tmp_path (~40 s of this test, for a default it does not check).
    monkeypatch.setenv("MEMSCALE_INFERENCE_MODEL", str(local_model_dir(os.environ.get("MEMSCALE_DATA_DIR", ".memscale"))))
    monkeypatch.setattr(server, "create_app", lambda config, **kw: seen.append(config.blend) or object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    base = ["serve", "--data-dir", str(tmp_path)]
    for args in ([], ["--recompute-ratio", "0.4", "--selection", "chunk_start"]):
        result = CliRunner().invoke(inference, base + args)
        assert result.exit_code == 0, result.output
    assert seen[0] == BlendConfig()
    assert seen[1] == BlendConfig(recompute_ratio=0.4, selection="chunk_start")


def test_serve_answers_and_exits_cleanly_on_sigterm(engine, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "app.inference.cli",
        "serve",
        "--port",
        str(port),
        "--threads",
        "1",
        "--model",
        engine.config.model_path,
        "--data-dir",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.3)
        assert r.json()["model_id"] == engine.model_id
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chunks", json={"texts": ["A short note."]}, timeout=60)
        assert r.status_code == 401  # every call but /healthz needs credentials
        key = (tmp_path / "inference.key").read_text().strip()  # generated once, 0600, in the data dir
        assert (tmp_path / "inference.key").stat().st_mode & 0o077 == 0
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chunks",
            json={"texts": ["A short note."]},
            timeout=60,
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 200
        assert any((tmp_path / "kv").rglob("*.safetensors"))  # the store lives under --data-dir
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
