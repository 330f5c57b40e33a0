"""Keys generated into the data folder (app/kit/runtime/signing.load_key): processes that start at once agree."""

from __future__ import annotations

import stat
import subprocess
import sys
import time

LOAD = """
import sys, time
from pathlib import Path
from app.kit.runtime.signing import load_key
while time.time() < float(sys.argv[2]):
    pass  # spinning, not sleeping: all of them ask within microseconds of each other
print(load_key(Path(sys.argv[1]), None, name="shared.key").decode())
"""


def test_processes_generating_the_key_at_once_all_get_the_one_written(tmp_path):
    """Six processes ask for a key that does not exist yet at the same instant: they all get the
    same full key, the file holds it (0600), and no candidate file is left behind. (The earlier
    open(O_EXCL) after an exists() check failed here in 5 of 8 rounds: FileExistsError, or an
    empty key read before the writer had written it.)"""
    at = str(time.time() + 1.5)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD, str(tmp_path), at], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err[-800:] for _, err in outs]
    keys = {out.strip() for out, _ in outs}
    key_file = tmp_path / "shared.key"
    assert keys == {key_file.read_text()} and len(keys.pop()) == 64
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["shared.key"]
