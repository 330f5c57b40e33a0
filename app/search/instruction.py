"""Instructed retrieval: a free-text instruction -> SearchFilters fields + a rewritten query.

"only finance rules from last quarter, not drafts, mine or my team's" becomes kinds=[rule],
since/until = the previous calendar quarter, exclude_labels=[draft], visibility=[private, group],
and "finance" goes to the query. Two interpreters:

- `interpret` (always): ordered regular patterns, each consuming the span it read (the time
  expressions by app.search.time_window, with `dateparser` for explicit dates: "since March 3",
  "until 15 April"); whatever is left, minus filler words, becomes query terms. Pure Python, no I/O.
- `interpret_llm` (opt-in, `MEMSCALE_INSTRUCTION_LLM=true`): asks the configured litellm model
  for JSON validated against a schema generated from `SearchFilters`; it only fills fields the
  deterministic reading left unset, and its answer goes through the same guard.

The guard: every filter is ANDed with `visible_to` in the repository, so no filter can widen
what the caller sees; on top, a request for someone else's, everyone's or another org's items,
or to get round permissions, is dropped and named in `ignored` (never an error).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from app.search.dates import MAX_PARSED
from app.search.schemas import Interpreted, SearchFilters
from app.search.time_window import Reading, normalised, read_times

LIST_FIELDS = ("kinds", "exclude_kinds", "labels", "exclude_labels", "visibility", "groups", "asset_kinds", "status", "source")

KIND_WORDS = [  # (pattern, kind); longer phrases first
    (r"schema[- ]hints?", "schema_hint"),
    (r"(?:tool[- ]call |agent )?(?:trajector(?:y|ies)|runs)(?: of the agent)?|tool[- ]call runs(?: of the agent)?", "trajectory"),
    (r"chat(?:s| logs?)|conversations?|dialogues?", "conversation"),
    (r"rules?|policies|policy", "rule"),
    (r"(?:how[- ]to )?procedures?|runbooks?|playbooks?|how[- ]tos?", "procedure"),
    (r"(?:user )?preferences?", "preference"),
    (r"facts?", "fact"),
    (r"feedback", "feedback"),
    (r"notes?", "note"),
]
LABEL_WORDS = {"pii": "pii", "confidential": "confidential", "draft": "draft", "drafts": "draft"}
ASSET_WORDS = [
    (r"(?:table )?schemas?(?: documentation| docs)?|table definitions", "table_schema"),
    (r"glossary(?: terms?| entries)?", "glossary"),
    (r"docs|documentation|documents?|wiki(?: pages?)?", "document"),
]
NEGATIONS = r"(?:not|no|except|excluding|exclude|without|but not|other than|apart from|minus|non)"
FILLER = set(
    """a an the and or of for to in on at by with from about into any all some only just please me my
show find get give list what which who that this these those is are was were be been it its them they their
anything everything something stuff things items item ones one entries entry memories memory results result
related concerning regarding focus also too including include nothing else i we our us can normally see
added created written wrote took take made kept stored recorded changed new old ones' s even m re ve ll d""".split()
)
WIDENING = [
    r"\b(?:everyone|everybody|anyone)(?:'s| else'?s?)?\b(?! (?:in|across) the org)",
    r"\ball (?:the )?(?:users|people|employees|members)'?s?\b",
    r"\bevery (?:user|person|team|group)'?s?\b",
    r"\bother (?:users|people|orgs?|organi[sz]ations|tenants|companies|teams|groups)\b",
    r"\ball (?:orgs|organi[sz]ations|tenants|companies)\b",
    r"\b(?:whole|entire) company'?s?\b",
    r"\bfrom (?:the )?[\w-]+ (?:org|organi[sz]ation|tenant)\b",
    r"\b(?:ignore|bypass|skip|override|disable)\w* (?:the )?"
    r"(?:permissions?|access(?: control)?|acls?|security|rules on access)\b",
    r"\b(?:hidden|restricted) items?(?: too)?\b",
    r"\bnot cleared for\b",
    r"\bcan'?t (?:normally )?see\b",
    r"\bgroups? i'?m not in\b",
    r"\bas an? (?:admin|administrator|superuser|root)\b",
    r"\bincluding private ones\b",
    r"\b(?:items|memories|notes|things|stuff) of [a-z]+\b",
]
TIME_POSSESSIVE = {"today", "yesterday", "tomorrow", "week", "month", "quarter", "year"}


def _widening(st: Reading) -> None:
    """Requests for what the caller may not have: dropped and listed in `ignored`."""
    for pattern in WIDENING:
        for m in list(re.finditer(pattern, st.text)):
            st.ignored.append(f"{m.group(0).strip()!r}: only items you may already see are searched")
            st.take(m)
    # someone else's: "bob's notes", "what carol wrote"
    for m in list(re.finditer(r"\b([a-z][a-z-]+)'s\b", st.text)):
        name = m.group(1)
        if name in TIME_POSSESSIVE or name in ("team", "group", "org", "company", "one", "it", "that", "what"):
            continue
        if re.search(rf"\b{re.escape(name)}'s", st.text) and re.search(
            rf"\b(?:the )?{re.escape(name)}'s\b(?= (?:group|team))", st.text
        ):
            continue
        if re.search(rf"\bthe {re.escape(name)} (?:team|group)'s", st.text):
            continue
        st.ignored.append(f"{m.group(0)!r}: another person's items are not searched for you")
        st.take(m)
    for m in list(re.finditer(r"\bwhat ([a-z]+) (?:wrote|said|added|created|noted)\b", st.text)):
        if m.group(1) not in ("i", "we", "you"):
            st.ignored.append(f"{m.group(0)!r}: another person's items are not searched for you")
            st.take(m)


def _people_and_sharing(st: Reading) -> None:
    sub = st.each

    sub(r"\bmine or my (?:team|group)s?'?s?\b", lambda m: st.add("visibility", "private", "group"))
    sub(
        r"\bnot shared with (?:the )?(?:whole )?(?:org|organi[sz]ation|company)\b",
        lambda m: st.add("visibility", "private", "group"),
    )
    sub(
        r"\b(?:shared with (?:the )?(?:whole |entire )?(?:org|organi[sz]ation|company|everyone)|org[- ]wide|"
        r"company[- ]wide|across the org|organi[sz]ation[- ]wide|public)\b",
        lambda m: st.add("visibility", "org"),
    )
    sub(r"\b(?:shared with my (?:groups?|teams?)|team[- ]level|group[- ]shared)\b", lambda m: st.add("visibility", "group"))

    def group(m: re.Match) -> None:
        name = next(g for g in m.groups() if g)
        if name in ("my", "our", "your", "a", "the", "whole", "entire", "same", "this", "that"):
            st.add("visibility", "group")  # "my team's": shared with my groups, no name given
        else:
            st.add("groups", name)

    sub(
        r"\b(?:shared with (?:the )?(?:group )?|from (?:the )?|(?:the )?)([a-z0-9_.&/-]+)(?: group| team)(?:'s)?\b"
        r"|\b(?:shared with |in )?group ([a-z0-9_.&/-]+)\b",
        group,
    )
    sub(
        r"\b(?:my (?:team|group)s?'?s?|team|group)\b(?! [a-z0-9_.&/-]+'s)"
        r"(?=(?: [a-z]+)?(?:,| *$| only| items| rules| notes| procedures))",
        lambda m: st.add("visibility", "group"),
    )
    sub(r"\bprivate(?: ones| items)?\b", lambda m: st.add("visibility", "private"))
    sub(
        r"\b(?:mine|my own|i (?:wrote|created|made|added|took|saved|stored|recorded)|by me|my)\b",
        lambda m: st.f.__setitem__("owner", "me"),
    )


def _labels(st: Reading) -> None:
    def labels_in(s: str) -> list[str]:
        return [LABEL_WORDS.get(w, w) for w in re.findall(r"[a-z0-9_.:&/-]+", s) if w not in ("and", "or", "the")]

    def into(name: str, read=lambda m: labels_in(m.group(1))):
        return lambda m: st.add(name, *read(m))

    one = lambda m: [LABEL_WORDS.get(m.group(1), m.group(1))]  # noqa: E731
    tag = r"([a-z0-9_.:&/-]+(?:(?: and | or |, ?)[a-z0-9_.:&/-]+)*)"
    st.each(rf"\b{NEGATIONS} (?:anything |items |stuff )?(?:labell?ed|tagged) {tag}", into("exclude_labels"))
    st.each(r"\bwithout (?:the |a )?([a-z0-9_.:&/-]+) (?:label|tag)\b", into("exclude_labels"))
    st.each(r"\b([a-z0-9_.:&/-]+)-(?:labell?ed|tagged)\b", into("labels", one))
    st.each(rf"\b(?:labell?ed|tagged|with (?:the |a )?label) {tag}", into("labels"))
    st.each(r"\bwith (?:the |a )?([a-z0-9_.:&/-]+) (?:label|tag)\b", into("labels"))
    words = "|".join(LABEL_WORDS)  # "pii notes", "no drafts", "non-confidential rules"
    st.each(rf"\b(?:{NEGATIONS}[- ](?:the )?)({words})\b(?: stuff| items)?", into("exclude_labels", one))
    st.each(rf"\b({words})\b", into("labels", one))


def _sources_status_assets(st: Reading) -> None:
    sub = st.each

    sub(
        r"\b(?:distilled|learn(?:t|ed)|extracted|derived)(?: from (?:the )?(?:user |agent |chat )?"
        r"(?:logs?|conversations?|runs|episodes|traces|chats))?\b",
        lambda m: st.add("source", "distill"),
    )
    sub(
        r"\b(?:written by hand|hand[- ]written|manually(?: added| written| entered)?|added by hand|by hand)\b",
        lambda m: st.add("source", "api"),
    )
    sub(r"\b(?:from (?:the )?)?bootstrap(?:ped)?\b", lambda m: st.add("source", "bootstrap"))
    sub(
        r"\b(?:including |with |and |plus )?(?:superseded|old|previous|past|outdated|earlier) versions? too\b"
        r"|\bincluding (?:superseded|old|previous|outdated|earlier) versions?\b",
        lambda m: st.add("status", "active", "superseded"),
    )
    sub(r"\b(?:only )?(?:superseded|outdated|old|previous) versions?(?: only)?\b", lambda m: st.add("status", "superseded"))
    sub(r"\bcurrent (?:ones|versions?|items)(?: only)?\b", lambda m: st.add("status", "active"))
    for pattern, kind in ASSET_WORDS:
        sub(rf"\b(?:in |from )?(?:the )?(?:{pattern})\b(?! (?:hints?|table))", lambda m, k=kind: st.add("asset_kinds", k))


def _kinds(st: Reading) -> None:
    for pattern, kind in KIND_WORDS:
        for m in list(re.finditer(rf"\b(?:({NEGATIONS}|but not|or) )?(?:{pattern})\b", st.text)):
            neg = m.group(1) and m.group(1) not in ("or",)
            st.add("exclude_kinds" if neg else "kinds", kind)
            st.take(m)


def _terms(st: Reading) -> list[str]:
    words = re.findall(r"[a-z0-9][a-z0-9&_.-]*", st.text)
    return [
        w.strip(".-")
        for w in words
        if w.strip(".-")
        and w.strip(".-") not in FILLER
        and w not in ("except", "excluding", "without", "not", "no", "but", "nothing", "versions", "version")
    ]


def interpret(instruction: str, *, now: datetime | None = None) -> tuple[SearchFilters, list[str], list[str]]:
    """(filters, query terms, ignored) read from `instruction` by the deterministic rules."""
    st = Reading(normalised(instruction), now or datetime.now(UTC))
    _widening(st)
    read_times(st)
    if st.dates.skipped:
        st.ignored.append(f"{st.dates.skipped} more dates: at most {MAX_PARSED} are read from one instruction")
    _sources_status_assets(st)
    _labels(st)
    _people_and_sharing(st)
    _kinds(st)
    return build_filters(st.f, st.ignored), _terms(st), st.ignored


def build_filters(f: dict, ignored: list[str]) -> SearchFilters:
    """A SearchFilters from a dict of fields; a value the model refuses is dropped and listed."""
    clean: dict[str, Any] = {}
    for name, value in f.items():
        try:
            SearchFilters.model_validate({name: value})
            clean[name] = value
        except ValidationError:
            ignored.append(f"{name}={value!r}: not a valid filter value")
    if "since" in clean and "until" in clean and clean["since"] >= clean["until"]:
        ignored.append("an empty time window")
        clean.pop("since"), clean.pop("until")
    return SearchFilters.model_validate(clean)


def merge(explicit: SearchFilters, read: SearchFilters) -> SearchFilters:
    """Explicit filters and the instruction's together: both must hold (lists intersect where
    both set one, time windows take the narrower bound), so nothing the caller set is widened."""
    out = explicit.model_dump()
    for name, value in read.model_dump().items():
        if value is None:
            continue
        cur = out.get(name)
        if cur is None:
            out[name] = value
        elif name in ("since",):
            out[name] = max(cur, value)
        elif name in ("until",):
            out[name] = min(cur, value)
        elif name in ("exclude_kinds", "exclude_labels"):
            out[name] = sorted(set(cur) | set(value))
        elif name in ("labels",):
            out[name] = sorted(set(cur) | set(value))  # labels are all required: more is narrower
        elif isinstance(cur, list):
            both = [v for v in cur if v in value]
            out[name] = both or cur  # a disjoint instruction cannot undo the caller's own filter
    return SearchFilters.model_validate(out)


def set_fields(f: SearchFilters) -> dict:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in f.model_dump().items() if v is not None}


def apply(
    instruction: str | None, query: str, explicit: SearchFilters, *, now: datetime | None = None, interpreter=None
) -> tuple[str, SearchFilters, Interpreted | None]:
    """(query to rank with, filters to apply, what to echo) for a request with `instruction`.
    `interpreter(instruction, now=...)` reads it (default `interpret`; app.search.prepare passes the
    LLM's reading, app.search.instruction_llm, when it is switched on)."""
    if not instruction or not instruction.strip():
        return query, explicit, None
    read, terms, ignored = (interpreter or interpret)(instruction, now=now)
    extra = [t for t in terms if t not in query.lower().split()]
    rewritten = f"{query} {' '.join(extra)}" if extra else query
    return rewritten, merge(explicit, read), Interpreted(filters=set_fields(read), query=rewritten, ignored=ignored)
