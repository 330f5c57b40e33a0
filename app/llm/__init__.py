"""LLM access for memscale: one gateway (litellm) in front of any provider or the local model.

Importing this package is cheap: litellm, torch and transformers load on first use.
"""

from app.llm.base import BaseGateway, GatewayStats, JSONFailure, LLMError, LLMTimeout
from app.llm.fake import FakeGateway
from app.llm.gateway import DEFAULT_MODEL, Gateway
from app.llm.jsonparse import JSONParseError, parse_json

__all__ = [
    "DEFAULT_MODEL",
    "BaseGateway",
    "FakeGateway",
    "Gateway",
    "GatewayStats",
    "JSONFailure",
    "JSONParseError",
    "LLMError",
    "LLMTimeout",
    "parse_json",
]
