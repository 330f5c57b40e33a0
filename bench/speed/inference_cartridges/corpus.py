"""A seeded, generated org corpus with checkable facts, and questions about it.

Two parts, so that two cartridges can be composed:
- part A, "projects and policies": project briefs (lead, budget, city, launch month, supplier,
  meeting day) and policies (numeric limits);
- part B, "people and vendors": staff profiles (role, team, extension, start year) and vendor
  contracts (what they supply, yearly value, renewal month).
Every fact has an answer string, accepted aliases, and same-type distractors drawn from the
other entities (for the multiple-choice score). Names are invented, so no context = guessing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FIRST = [
    "Maria",
    "Tomas",
    "Ana",
    "Kenji",
    "Leila",
    "Piotr",
    "Ines",
    "Oskar",
    "Amara",
    "Rafael",
    "Sofia",
    "Hugo",
    "Nadia",
    "Emeka",
    "Greta",
    "Luca",
    "Yara",
    "Dmitri",
    "Chloe",
    "Arjun",
]
LAST = [
    "Chen",
    "Berg",
    "Ruiz",
    "Tanaka",
    "Haddad",
    "Nowak",
    "Ferreira",
    "Lund",
    "Okafor",
    "Silva",
    "Moreau",
    "Keller",
    "Petrov",
    "Adeyemi",
    "Larsen",
    "Romano",
    "Haider",
    "Volkov",
    "Dubois",
    "Mehta",
]
CODENAMES = [
    "Falcon",
    "Orion",
    "Juniper",
    "Basalt",
    "Meridian",
    "Kestrel",
    "Tundra",
    "Lantern",
    "Cobalt",
    "Saffron",
    "Harbor",
    "Quill",
]
CITIES = ["Lisbon", "Oslo", "Krakow", "Nairobi", "Porto", "Tallinn", "Lyon", "Montreal", "Osaka", "Valencia", "Dublin", "Graz"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
PRODUCTS = [
    "a billing dashboard",
    "a warehouse robot fleet manager",
    "a mobile banking app",
    "a customer support chatbot",
    "a fraud detection service",
    "an energy metering platform",
    "a supplier portal",
    "a translation memory tool",
    "a clinical scheduling system",
    "a data catalogue",
    "a payroll engine",
    "a fleet telematics service",
]
VENDORS = [
    "Nordlicht GmbH",
    "Vantor Systems",
    "Bluequay Ltd",
    "Ostrava Data",
    "Kelpwave Inc",
    "Marisol Tech",
    "Greyfen Labs",
    "Tessaract AG",
]
SUPPLIES = [
    "cloud hosting",
    "laptops and monitors",
    "security audits",
    "office furniture",
    "payment processing",
    "translation services",
    "network equipment",
    "legal advice",
]
ROLES = [
    "data engineer",
    "product manager",
    "security analyst",
    "finance director",
    "UX designer",
    "site reliability engineer",
    "legal counsel",
    "support lead",
    "procurement officer",
    "research scientist",
]
TEAMS = ["Atlas", "Beacon", "Cinder", "Delta", "Ember", "Fjord", "Granite", "Helix"]
FILLER = [
    "The steering committee reviews progress every quarter.",
    "Questions about this document go to the operations office.",
    "This page replaces all earlier versions of the same document.",
    "Minutes of past meetings are kept in the shared archive.",
    "Changes must be announced in the weekly newsletter.",
    "The document was reviewed by the compliance group last month.",
]


@dataclass
class Fact:
    part: str  # "A" or "B"
    question: str
    answer: str
    aliases: list[str]
    distractors: list[str]


@dataclass
class PairQuestion:
    question: str
    a: Fact
    b: Fact


@dataclass
class BenchCorpus:
    part_a: list[str]
    part_b: list[str]
    facts: list[Fact] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return self.part_a + self.part_b


def _money(rng: random.Random) -> str:
    return f"{rng.randint(11, 98) / 10:.1f} million"


def _distractors(rng: random.Random, pool: list[str], answer: str, n: int = 3) -> list[str]:
    others = sorted({x for x in pool if x != answer})
    return rng.sample(others, n)


def build_corpus(seed: int = 7, projects: int = 12, policies: int = 5, staff: int = 18, vendors: int = 8) -> BenchCorpus:
    rng = random.Random(seed)
    people = [f"{first} {last}" for first, last in zip(rng.sample(FIRST, len(FIRST)), rng.sample(LAST, len(LAST)))]
    facts: list[Fact] = []
    part_a: list[str] = []
    part_b: list[str] = []

    # -- part A: project briefs ------------------------------------------------------------
    codes = rng.sample(CODENAMES, projects)
    rows = [
        dict(
            code=c,
            lead=people[i],
            budget=_money(rng),
            city=rng.choice(CITIES),
            month=rng.choice(MONTHS),
            vendor=rng.choice(VENDORS),
            day=rng.choice(WEEKDAYS),
            product=rng.choice(PRODUCTS),
        )
        for i, c in enumerate(codes)
    ]
    for r in rows:
        part_a.append(
            f"Project {r['code']} brief. Project {r['code']} builds {r['product']}. It is led by "
            f"{r['lead']}. The approved budget of Project {r['code']} is {r['budget']} euros. The "
            f"team works from the {r['city']} office and plans to launch in {r['month']}. The main "
            f"supplier of Project {r['code']} is {r['vendor']}. Status meetings are held every "
            f"{r['day']}. {' '.join(rng.sample(FILLER, 2))}"
        )
        col = lambda k: [x[k] for x in rows]  # noqa: E731
        facts += [
            Fact("A", f"Who leads Project {r['code']}?", r["lead"], [r["lead"]], _distractors(rng, col("lead"), r["lead"])),
            Fact(
                "A",
                f"What is the approved budget of Project {r['code']}?",
                f"{r['budget']} euros",
                [r["budget"]],
                [f"{d} euros" for d in _distractors(rng, col("budget"), r["budget"])],
            ),
            Fact(
                "A",
                f"Which office does the Project {r['code']} team work from?",
                r["city"],
                [r["city"]],
                _distractors(rng, CITIES, r["city"]),
            ),
            Fact(
                "A",
                f"In which month does Project {r['code']} plan to launch?",
                r["month"],
                [r["month"]],
                _distractors(rng, MONTHS, r["month"]),
            ),
            Fact(
                "A",
                f"Who is the main supplier of Project {r['code']}?",
                r["vendor"],
                [r["vendor"]],
                _distractors(rng, VENDORS, r["vendor"]),
            ),
        ]

    # -- part A: policies ------------------------------------------------------------------
    policy_specs = [
        (
            "Travel policy",
            "Hotel costs are reimbursed up to {} euros per night.",
            "Up to how many euros per night are hotel costs reimbursed?",
            range(90, 260, 10),
        ),
        (
            "Expense policy",
            "Expense reports must be filed within {} days of the purchase.",
            "Within how many days must expense reports be filed?",
            range(12, 60),
        ),
        (
            "Remote work policy",
            "Employees may work remotely for up to {} days per month.",
            "For up to how many days per month may employees work remotely?",
            range(5, 18),
        ),
        (
            "Training policy",
            "Each employee has a yearly training budget of {} euros.",
            "What is the yearly training budget per employee?",
            range(600, 3000, 50),
        ),
        (
            "Purchasing policy",
            "Purchases above {} euros need two signatures.",
            "Above how many euros do purchases need two signatures?",
            range(2000, 9000, 250),
        ),
    ][:policies]
    for title, sentence, question, values in policy_specs:
        pool = [str(v) for v in values]
        value = rng.choice(pool)
        part_a.append(f"{title}. {sentence.format(value)} {rng.choice(FILLER)} {rng.choice(FILLER)}")
        facts.append(Fact("A", question, value, [value], _distractors(rng, pool, value)))

    # -- part B: staff profiles -----------------------------------------------------------
    staff_rows = [
        dict(
            name=people[(projects + i) % len(people)],
            role=rng.choice(ROLES),
            team=rng.choice(TEAMS),
            ext=str(rng.randint(2000, 8999)),
            year=str(rng.randint(2009, 2024)),
        )
        for i in range(staff)
    ]
    exts = [r["ext"] for r in staff_rows]
    for r in staff_rows:
        part_b.append(
            f"Staff profile: {r['name']}. {r['name']} works as a {r['role']} in the {r['team']} "
            f"team and joined the company in {r['year']}. {r['name']} can be reached on phone "
            f"extension {r['ext']}."
        )
        facts += [
            Fact("B", f"What is the phone extension of {r['name']}?", r["ext"], [r["ext"]], _distractors(rng, exts, r["ext"])),
            Fact("B", f"What job does {r['name']} do?", r["role"], [r["role"]], _distractors(rng, ROLES, r["role"])),
            Fact("B", f"Which team is {r['name']} in?", r["team"], [r["team"]], _distractors(rng, TEAMS, r["team"])),
        ]

    # -- part B: vendor contracts ---------------------------------------------------------
    vrows = [
        dict(vendor=v, supply=s, value=_money(rng), month=rng.choice(MONTHS))
        for v, s in zip(rng.sample(VENDORS, vendors), rng.sample(SUPPLIES, vendors))
    ]
    for r in vrows:
        part_b.append(
            f"Vendor contract: {r['vendor']}. {r['vendor']} supplies {r['supply']} to the company. "
            f"The contract is worth {r['value']} euros per year and renews every {r['month']}. "
            f"{rng.choice(FILLER)}"
        )
        facts += [
            Fact(
                "B",
                f"What does {r['vendor']} supply to the company?",
                r["supply"],
                [r["supply"]],
                _distractors(rng, SUPPLIES, r["supply"]),
            ),
            Fact(
                "B",
                f"In which month does the {r['vendor']} contract renew?",
                r["month"],
                [r["month"]],
                _distractors(rng, MONTHS, r["month"]),
            ),
        ]
    rng.shuffle(part_a)
    rng.shuffle(part_b)
    return BenchCorpus(part_a, part_b, facts)


def sample_questions(corpus: BenchCorpus, n: int, seed: int = 11) -> list[Fact]:
    """``n`` facts, half from each part (as far as they go), in a seeded order."""
    rng = random.Random(seed)
    a = [f for f in corpus.facts if f.part == "A"]
    b = [f for f in corpus.facts if f.part == "B"]
    picked = rng.sample(a, min(len(a), n // 2)) + rng.sample(b, min(len(b), n - n // 2))
    rng.shuffle(picked)
    return picked


def pair_questions(corpus: BenchCorpus, n: int, seed: int = 13) -> list[PairQuestion]:
    """Questions that need one fact from each part: both answers must appear."""
    rng = random.Random(seed)
    a = [f for f in corpus.facts if f.part == "A"]
    b = [f for f in corpus.facts if f.part == "B"]
    out = []
    for fa, fb in zip(rng.sample(a, min(n, len(a))), rng.sample(b, min(n, len(b)))):
        out.append(PairQuestion(f"Answer both questions. First: {fa.question} Second: {fb.question}", fa, fb))
    return out
