"""The signed grant on a /v1/context handoff (app/kit/runtime/signing.py): the inference tier will serve
exactly the chunk hashes and cartridge ids this handoff names, to whoever holds the token, until
it expires. The service only ever names what the caller may see, so the token carries no more.
It also carries the caller's org (an opaque id: the tier's fairness key) and the caps of one
request on it (`handoff_max_prompt_tokens`, `handoff_max_new_tokens`), which the tier enforces."""

from __future__ import annotations

from app.auth.principal import Principal
from app.kit.runtime import signing


def sign(settings, principal: Principal, handoff: dict) -> dict:
    """The handoff with its `token` (and `token_expires_in_s`) added."""
    token = signing.sign(
        settings.inference_secret(),
        org=str(principal.org_id),
        sub=str(principal.user_id),
        chunks=[c["content_hash"] for c in handoff.get("chunks", [])],
        cartridges=[str(c["id"]) for c in handoff.get("cartridges", [])],
        ttl_s=settings.handoff_ttl_s,
        max_prompt_tokens=settings.handoff_max_prompt_tokens,
        max_new_tokens=settings.handoff_max_new_tokens,
    )
    return {
        **handoff,
        "token": token,
        "token_expires_in_s": settings.handoff_ttl_s,
        "max_prompt_tokens": settings.handoff_max_prompt_tokens,
        "max_new_tokens": settings.handoff_max_new_tokens,
    }
