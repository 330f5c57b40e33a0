"""Seeded synthetic enterprise traces: varied enough for real embeddings and full text."""

from __future__ import annotations

import random

SYSTEMS = [
    "billing service",
    "kafka cluster",
    "postgres replica",
    "auth gateway",
    "search index",
    "etl pipeline",
    "data warehouse",
    "payment api",
    "mobile app",
    "feature store",
    "ci runner",
    "cdn edge",
    "ml trainer",
    "crm sync",
    "inventory db",
    "email relay",
    "vpn",
    "k8s ingress",
    "redis cache",
    "s3 bucket",
]
EVENTS = [
    "latency spiked",
    "deploy failed",
    "disk filled up",
    "certificate expired",
    "memory leaked",
    "queue backed up",
    "schema migration stalled",
    "rate limit tripped",
    "index got corrupted",
    "cost doubled",
    "alert was noisy",
    "backup was skipped",
    "config drifted",
    "tests were flaky",
]
FIXES = [
    "rolled back the release",
    "raised the connection pool",
    "rotated the credentials",
    "added an index",
    "increased the retention window",
    "pinned the dependency",
    "scaled out two nodes",
    "purged the cache",
    "rewrote the query",
    "opened a vendor ticket",
    "added a circuit breaker",
    "throttled the batch job",
]
TEAMS = ["finance", "platform", "growth", "security", "data", "support", "sales ops", "mobile"]
WHEN = [
    "on monday",
    "during the quarter close",
    "after the holiday freeze",
    "at 3am",
    "in the eu region",
    "for the enterprise tier",
    "before the board meeting",
    "during the migration",
]


def sentence(rng: random.Random) -> str:
    s, e, f, t, w = (rng.choice(SYSTEMS), rng.choice(EVENTS), rng.choice(FIXES), rng.choice(TEAMS), rng.choice(WHEN))
    forms = [
        f"The {s} {e} {w}; the {t} team {f}.",
        f"{t.capitalize()} reported that the {s} {e} {w}, so we {f}.",
        f"Postmortem: {s} {e} {w}. Resolution: {f}. Owner: {t}.",
        f"When the {s} {e}, the {t} on-call {f} {w}.",
    ]
    return rng.choice(forms)


def query(rng: random.Random) -> str:
    return rng.choice(
        [
            f"{rng.choice(SYSTEMS)} {rng.choice(EVENTS)}",
            f"how did {rng.choice(TEAMS)} fix the {rng.choice(SYSTEMS)}",
            f"{rng.choice(FIXES)} {rng.choice(WHEN)}",
        ]
    )
