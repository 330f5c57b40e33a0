"""casbin enforcer built at start-up from policies/; decisions cached per (role, org, obj, act)."""

from __future__ import annotations

import threading
from pathlib import Path

import casbin

from app.auth.principal import Principal

POLICY_DIR = Path(__file__).resolve().parents[2] / "policies"


class Authorizer:
    def __init__(self, policy_dir: Path = POLICY_DIR):
        self._enforcer = casbin.Enforcer(str(policy_dir / "model.conf"), str(policy_dir / "policy.csv"))
        self._cache: dict[tuple[str, str, str, str], bool] = {}
        self._lock = threading.Lock()

    def allowed(self, principal: Principal, obj: str, act: str) -> bool:
        dom = str(principal.org_id)
        for role in principal.roles:
            key = (role, dom, obj, act)
            hit = self._cache.get(key)
            if hit is None:
                with self._lock:  # casbin's enforcer is not thread-safe
                    hit = bool(self._enforcer.enforce(role, dom, obj, act))
                self._cache[key] = hit
            if hit:
                return True
        return False
