import hashlib


def sha256(text: str) -> str:
    """Content hash of a text (the key of its chunk KV cache in the inference tier)."""
    return hashlib.sha256(text.encode()).hexdigest()
