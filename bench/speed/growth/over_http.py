"""The growth bench's over-HTTP arms: the service served in a thread (uvicorn, loopback), the same
reader and the same queries as the server-side arms, asked through `/v1/search` (one type, all
types) and `/v1/context`. The query's vector is the one the server-side arms use (the rows are
drawn, not embedded, so a model's vector of the query words would rank against nothing): the
service's embedder looks it up, so the HTTP figures add the request's own cost (HTTP, auth,
limits, the read gate, the recorded retrieval, serialisation; for context also the token fitting
and handoff) to the same ranking, not a model's time."""

from __future__ import annotations

import numpy as np

HTTP_ARMS = ("one type HTTP", "all types HTTP", "context HTTP")


class QueryVectors:
    """An embedder that knows only the bench's queries: each text's vector as drawn."""

    def __init__(self, model: str, queries: list[tuple[str, list[float]]]):
        self.model, self.dim = model, len(queries[0][1])
        self._vec = {words: np.asarray(vec, dtype=np.float32) for words, vec in queries}

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._vec[t] for t in texts])

    embed = embed_queries


class Served:
    """The app over HTTP for one reader's key; `ask(arm, words)` one request, raising on an error."""

    def __init__(self, settings, queries: list[tuple[str, list[float]]], key: str):
        import httpx

        from app.main import create_app
        from bench.common import serve_in_thread

        settings = settings.model_copy(update={"log_level": "WARNING", "rate_limit_per_minute": 0})
        app = create_app(settings, embedder=QueryVectors(settings.embedding_model, queries))
        self.http = httpx.Client(base_url=serve_in_thread(app), timeout=120, headers={"Authorization": f"Bearer {key}"})

    def ask(self, arm: str, words: str) -> None:
        if arm == "context HTTP":
            r = self.http.post("/v1/context", json={"query": words, "budget_tokens": 2000})
        else:
            body = {"query": words, "k": 10, "mode": "hybrid"}
            if arm == "one type HTTP":
                body["types"] = ["memory"]
            r = self.http.post("/v1/search", json=body)
        r.raise_for_status()

    def warm(self, words: str) -> None:
        """One request of each arm, unmeasured: the first /v1/context loads what fits tokens."""
        for arm in HTTP_ARMS:
            self.ask(arm, words)

    def close(self) -> None:
        self.http.close()
