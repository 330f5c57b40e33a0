"""A synthetic multi-chunk QA set whose answers need facts from two or three chunks.

Each example is a small facilities wiki: 6-10 chunks (~200-400 tokens each), one per place
(archive, server room, ...). Each example is about one kind of fact (door code, phone extension
or manager): every chunk states it for its place, among its first sentences and followed by
varied, irrelevant office sentences, so every other chunk holds a same-looking distractor. A
question asks for that fact about two (25%: three) places whose notes sit in different chunks;
the gold answer lists the values in the asked order ("4417 and 9032"). Values are unique inside
an example, so no answer can be read off the wrong chunk by luck. Deterministic given the seed.

Why this shape: SmolLM2-135M cannot do real multi-hop reasoning. On people profiles with six
similar attributes per chunk it answered at chance level even with full prefill; with three
kinds of fact per chunk it recovered ~25% of gold values, with one kind stated near the start of
each chunk ~40%. Questions that need one value from each of several chunks still make the answer
depend on KV spread over the whole prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PLACES = [
    "archive",
    "server room",
    "greenhouse",
    "workshop",
    "east wing",
    "library",
    "garage",
    "studio",
    "clinic",
    "print shop",
    "loading dock",
    "boiler room",
    "mail room",
    "north lab",
    "gym",
    "cafeteria",
]
MANAGERS = [
    "Mira Olsen",
    "Tomas Reid",
    "Ilse Varga",
    "Bruno Costa",
    "Keiko Tanaka",
    "Omar Haddad",
    "Greta Lind",
    "Pavel Novak",
    "Nadia Berg",
    "Felix Moreau",
    "Sanne Quist",
    "Ravi Iyer",
    "Lotte Brandt",
    "Dario Ferri",
    "Yara Kaya",
    "Emil Stroud",
]
PEOPLE = ["Ana", "Ben", "Chloe", "Dev", "Eva", "Finn", "Gina", "Hal", "Iris", "Jon", "Kim", "Leo", "Maya"]
ACTIONS = ["checked", "cleaned", "repainted", "inspected", "reorganised", "photographed", "measured", "labelled"]
THINGS = [
    "the shelves",
    "the windows",
    "the fire exits",
    "the cable trays",
    "the storage boxes",
    "the lamps",
    "the notice board",
    "the floor plan",
    "the spare keys",
    "the first-aid kit",
    "the radiators",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
GENERIC = [
    "Visitors must sign in at the front desk and wear a visitor pass.",
    "Fire drills take place twice a year and last about fifteen minutes.",
    "The cleaning crew comes in every evening after six.",
    "Deliveries are accepted between eight in the morning and four in the afternoon.",
    "Smoking is not allowed anywhere in the building or near the entrances.",
    "Lost items are kept at reception for thirty days.",
    "The heating is switched off on public holidays to save energy.",
    "A floor warden is named for each floor and trained once a year.",
    "Food and drinks must be stored in closed containers.",
    "Broken equipment should be reported through the facilities portal.",
    "The lights switch off automatically when nobody has moved for twenty minutes.",
    "Noise should be kept low during the morning meetings.",
    "The windows are cleaned on the outside every spring and autumn.",
    "Emergency numbers are printed on the poster next to the door.",
    "Chairs and tables may not be moved to other rooms without permission.",
    "The insurance inspection found no serious problems last year.",
    "Umbrellas can be borrowed from the stand near the lifts.",
    "Recycling bins for paper, glass and plastic stand in the corridor.",
]

KINDS = {
    "door_code": ("What is the door code of the {x}?", "What are the door codes of {xs}?"),
    "extension": ("What is the phone extension of the {x}?", "What are the phone extensions of {xs}?"),
    "manager": ("Who manages the {x}?", "Who manages {xs}, respectively?"),
}


@dataclass
class Example:
    id: str
    chunks: list[str]
    question: str
    answers: list[str]  # gold values in the asked order
    gold: str  # "A and B" / "A, B and C"
    evidence: list[int]  # chunk indices holding the answers


def _sentence(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(GENERIC)
    return f"On {rng.choice(DAYS)}, {rng.choice(PEOPLE)} {rng.choice(ACTIONS)} {rng.choice(THINGS)}."


STATEMENTS = {
    "door_code": "The door code of the {place} is {value}.",
    "extension": "The phone extension of the {place} is {value}.",
    "manager": "The {place} is managed by {value}.",
}


def _chunk(rng: random.Random, place: str, kind: str, value: str) -> str:
    filler = [_sentence(rng) for _ in range(rng.randint(18, 28))]
    filler.insert(rng.randint(0, 3), STATEMENTS[kind].format(place=place, value=value))
    return f"Notes on the {place}\n" + " ".join(filler)


def _join(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def build(n_examples: int, seed: int = 7, min_chunks: int = 6, max_chunks: int = 10) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n_examples):
        k = rng.randint(min_chunks, max_chunks)
        places = rng.sample(PLACES, k)
        codes = rng.sample(range(1000, 10000), k)
        extensions = rng.sample(range(100, 1000), k)
        managers = rng.sample(MANAGERS, k)
        facts = [{"door_code": str(c), "extension": str(e), "manager": m} for c, e, m in zip(codes, extensions, managers)]
        kind = rng.choice(sorted(KINDS))
        chunks = [_chunk(rng, p, kind, f[kind]) for p, f in zip(places, facts)]
        idx = rng.sample(range(k), 3 if rng.random() < 0.25 else 2)
        values = [facts[j][kind] for j in idx]
        question = KINDS[kind][1].format(xs=_join([f"the {places[j]}" for j in idx]))
        out.append(Example(f"wiki-{i:03d}", chunks, question, values, _join(values), sorted(idx)))
    return out
