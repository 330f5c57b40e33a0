from __future__ import annotations

from fastapi import APIRouter

from app.kit.errors import COMMON_ERRORS

router = APIRouter(prefix="/v1/knowledge", tags=["knowledge"], responses=COMMON_ERRORS)
