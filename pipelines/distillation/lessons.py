"""Deterministic lesson finding: episodes → turns → sentences → scored candidates → clean statements.

The default local model (SmolLM2-135M) cannot judge or extract reliably, so distillation rests on
this module and the model only adds to it (``judging.judge`` / ``extraction.extract``).

1. **Segment** (``segment.turns``, ``segment.sentences``): speaker turns with a role (user, agent,
   tool, task), then sentences.
2. **Find** (:func:`candidates`, this module): a sentence bears a lesson when its cues and structure say so:
   explicit memory cues ("remember that", "from now on", "for the record", "heads up"), rule
   modals (always/never/must/only), imperatives with a general object, preferences, definitions
   and conventions ("X is/means/is stored in Y"), ownership, corrections of the agent ("No, ...",
   "X, not Y"), and in trajectories the agent's explanation between a failed and a successful
   tool call. Questions, agent acknowledgements, greetings, transient first-person status and
   one-off requests ("move it to Thursday") score low. Scores are additive and capped at 1.
3. **Rewrite** (``statements.statement``): one clean, self-contained sentence, values kept verbatim.

Every candidate keeps the index of the turn it came from, so the memory cites its episode and
the place in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.llm.guard import VALUE
from pipelines.distillation import prompts as P
from pipelines.distillation.segment import LEAD_LABEL, sentences, turns
from pipelines.distillation.statements import statement, strip_leads

_CUE = re.compile(
    r"\b(remember|keep in mind|from now on|going forward|moving forward|for the record|heads[- ]up|"
    r"fyi|just so you know|for future reference|be aware|note that|please note|don't forget|as a rule|"
    r"team rule|policy|rule|glossary|definition|runbook|schema note|convention|lessons?)\b",
    re.I,
)
_MODAL = re.compile(
    r"\b(always|never|must|mustn't|must not|has to|have to|need(s)? to|needs|required|requires?|"
    r"not allowed|only|at most|at least|no more than|make sure|do not|don't|avoid)\b",
    re.I,
)
_IMPERATIVE = re.compile(
    r"^(please\s+)?(always\s+|never\s+|do not\s+|don't\s+)?(use|report|send|put|keep|write|include|exclude|avoid|"
    r"cc|copy|attach|reply|run|check|restart|convert|filter|route|escalate|tag|label|ask|open|wait|add|store|post|"
    r"apply|refresh|paginate|divide|join|contact|email|notify|show|format|round|give|book|follow|make sure|"
    r"ensure|double-check|verify|review|redact|anonymi[sz]e|encrypt|archive|clean|deploy|merge|commit|call|"
    r"mention|exclude|count|treat|read|prefer|switch|set|export|upload|save|name|sign)\b",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(prefer(s|red)?|would rather|'d rather|rather than|i (really )?(like|love|hate|want|need)|wants|"
    r"likes|dislikes?|favou?rite|instead of|over long|not excel)\b",
    re.I,
)
_DEFINE = re.compile(
    r"\b(means|mean|stands for|refers to|is defined as|counts? only|only counts?|excludes?|includes?|"
    r"(is|are) (stored|kept|retained|measured|recorded|expressed|given|reported|announced|named|called|"
    r"located|hosted|managed|owned|due|closed|open|wiped|rebuilt|deleted|frozen|blocked|reachable|required|"
    r"needed|allowed|soft-deleted)|(is|are) in\b|is the (owner|contact|escalation contact|lead|manager)|"
    r"owns|is responsible|runs on|run on|lives? (under|in|at)|moved (under|to)|only answers|only works|"
    r"expires?|accepts?|returns?|joins? to|starts?|starting|start on|runs? (nightly|daily|weekly|every)|"
    r"pages|gets paged|go(es)? to|belongs? to|reports? to|is our|are our|stores|store|contains|holds|"
    r"(runs|leads|maintains|manages|operates|is in charge of) the)\b",
    re.I,
)
_WEAK_DEFINE = re.compile(r"\b(is|are|uses|use|has|have|get|gets|needs|need|requires?)\b", re.I)
_PROCEDURE = re.compile(r"^(to|when|whenever|if|before|after)\b[^,]{3,80},\s*(.*)$", re.I)
# "always/never + verb" is a rule; "always the same", "never seen such ..." are remarks
_BARE_RULE = re.compile(
    r"^(please\s+)?(always|never|do not|don't|first)\s+(?!(the|a|an|so|such|this|that|these|those|"
    r"same|seen|been|mind|again|ever|more|less|too|very|really|gonna|fun|late|easy)\b)[a-z]+",
    re.I,
)
_CAUSE = re.compile(
    r"\b(because|due to|caused by|root cause|real cause|fix(ed|es)?|solved|resolved|refreshing|"
    r"restarting|the cure)\b",
    re.I,
)
_ACK = re.compile(
    r"\b(will do|noted|understood|got it|i'll remember|i will remember|from now on|going forward|"
    r"good to know|thanks for (clarifying|the heads)|will keep|i'll use|i will use|updated)\b",
    re.I,
)
_CORRECTION = re.compile(
    r"^(no|nope|wrong|incorrect|not quite|not (for|in|here|at|on) \w+|actually|careful|wait|that's (wrong|not right|"
    r"incorrect|outdated|old)|that is (wrong|not right|incorrect|outdated)|wrong column)\b",
    re.I,
)
_NOT_Y = re.compile(r",?\s+not\s+[\w$€.%'-]+(\s[\w$€.%'-]+){0,3}\s*$|\bnot\s+\w+\s+but\b|\binstead of\b", re.I)
_QUANT = re.compile(
    r"\b(all|every|each|any|whenever|when|if|before|after|above|below|over|under|"
    r"outside|during|per|by default)\b",
    re.I,
)
_ONE_OFF = re.compile(
    r"\b(this one|that one|tomorrow|today|yesterday|tonight|right now|this week|next week|"
    r"again|(move|send|do|fix|check|schedule|book|resend|change|redo) (it|them)|please resend)\b",
    re.I,
)
_CHATTER = re.compile(
    r"\b(thanks|thank you|lol|haha|bye|see you|good morning|hello|hi|hey|great job|amazing|"
    r"awesome|hilarious|congrats|welcome|enjoy|sorry|no worries|brb|ugh|cool)\b",
    re.I,
)
# laughter, emoticons, wishes and social events: talk about the day, not knowledge to keep
_SOCIAL = re.compile(
    r"\b(lol|lmao|haha\w*|hehe|honestly|omg|yay)\b|[:;]-?[)(DP]|\b(have|enjoy) an? (great|nice|good|"
    r"lovely|wonderful|fun|relaxing)\b|\b(birthday|cake|lunch|coffee|drinks|party|farewell|"
    r"congrat\w*)\b|\byou('re| are) (great|awesome|the best|amazing|a star)\b",
    re.I,
)
# a state of the moment ("the wifi is down again"), not a standing fact
_TRANSIENT = re.compile(
    r"\b(is|are) (down|up|out|broken|slow|jammed|back|late|away|offline|on it)\b|\b(right now|"
    r"at the moment|currently|today|tonight|this (morning|afternoon|evening))\b",
    re.I,
)
_TEAM_HABIT = re.compile(
    r"^(we|the team|our team|everyone|everybody|nobody|no one)\s+(always|never|must|should|only|"
    r"don't|do not|usually)\b",
    re.I,
)
_DEICTIC_ONLY = re.compile(
    r"^(please\s+)?(keep (that|this|it) in mind|remember (that|this|it)|note (that|this))\b"
    r"[^,;]{0,30}$",
    re.I,
)
_FIRST_STATUS = re.compile(
    r"^(i(?! (always|never|prefer|like|love|hate|want|need|usually)\b)|i'm|i am|i'll|i will|"
    r"i was|i think|i found|i forget|i always forget|we're|"
    r"we are|let's|let me|never mind|never again|don't worry|hmm)\b",
    re.I,
)
_FAIL = re.compile(
    r"\b(error|failed|fails?|failure|denied|accessdenied|timed? ?out|timeout|exception|invalid|"
    r"unchanged|still (old|the old|wrong|stale|missing|broken|failing|empty)|stale|wrong|not updated|"
    r"no effect|mismatch|"
    r"unauthori[sz]ed|forbidden|not found|bad request|too large|too high|too many|blocked|stalled|"
    r"broken|0 rows|does not exist|40[0-9]|5\d\d)\b",
    re.I,
)
_OK = re.compile(
    r"(->|=>|→)\s*(ok|200|201|success|succeeded|done|refunded|\d)|\b(ok in|matches|that's it|"
    r"correct|worked|success|fine)\b",
    re.I,
)
_PROGRESS = re.compile(
    r"^(retrying|trying|connecting|restarting|checking|looking|running|let me|i will|i'll|"
    r"now|next|done|sorry|ok|corrected|resent|updated)\b",
    re.I,
)


@dataclass(frozen=True)
class Candidate:
    statement: str
    kind: str  # fact | rule | preference | procedure
    score: float
    turn: int
    cues: tuple[str, ...]


def candidates(content: str, *, kind: str = "", outcome: str | None = None) -> list[Candidate]:
    """Lesson-bearing sentences of one episode, rewritten as statements (with their turn index)."""
    ts = turns(content)
    has_tools = any(t.role == "tool" for t in ts) or kind == "trajectory"
    fail_seen = False
    out: list[Candidate] = []
    for i, t in enumerate(ts):
        if t.role == "tool":
            fail_seen = fail_seen or bool(_FAIL.search(t.text))
            continue
        if t.role == "task":
            continue
        prev_agent = i > 0 and ts[i - 1].role == "agent"
        nxt = ts[i + 1] if i + 1 < len(ts) else None
        acked = t.role != "agent" and nxt is not None and nxt.role == "agent" and bool(_ACK.search(nxt.text))
        prev_fail = fail_seen or any(_FAIL.search(u.text) for u in ts[:i] if u.role == "user")
        sents = sentences(t.text)
        turn_cue = bool(sents) and bool(_CUE.search(sents[0]) or LEAD_LABEL.match(sents[0]))
        turn_correction = t.role in ("user", "none") and bool(_CORRECTION.match(t.text)) and (prev_agent or has_tools)
        for j, sent in enumerate(sents):
            if t.role == "agent" and not (has_tools and prev_fail):
                continue  # an agent's acknowledgement or answer is not a lesson the user gave
            ctx = _Ctx(
                first=j == 0,
                role=t.role,
                turn_cue=turn_cue and j > 0,
                correction=turn_correction,
                acked=acked,
                fix=has_tools and t.role == "agent" and prev_fail,
            )
            c = _score_sentence(sent, ctx)
            if c is not None:
                s, cues, kind_ = c
                text = statement(sent)
                if text and 3 <= len(P.words(text)) <= 45:
                    out.append(Candidate(text, kind_, round(min(1.0, s), 3), t.index, tuple(cues)))
    return _unique(out)


@dataclass(frozen=True)
class _Ctx:
    first: bool
    role: str
    turn_cue: bool  # an earlier sentence of this turn announced lessons ("remember that ... Also, ...")
    correction: bool  # the turn corrects the agent ("No, that's wrong. ...")
    acked: bool  # the agent acknowledged a standing instruction ("Noted", "Will do")
    fix: bool  # the agent explains what fixed a failed tool call


def _score_sentence(sent: str, ctx: _Ctx) -> tuple[float, list[str], str] | None:
    s = sent.strip()
    if not s or s.endswith("?") or P.screen_injection(s):
        return None
    body = strip_leads(s)
    if len(P.words(body)) < 3 or len(P.content_words(body)) + bool(VALUE.search(body)) < 2:
        return None
    cues: list[str] = []
    score = 0.0

    def add(name: str, w: float) -> None:
        nonlocal score
        score += w
        cues.append(name)

    if _CUE.search(s) or LEAD_LABEL.match(s):
        add("cue", 0.3)
    elif ctx.turn_cue:
        add("cue-carry", 0.2)
    modal = bool(_MODAL.search(body))
    if modal:
        add("modal", 0.35)
        if _TEAM_HABIT.match(body):  # "We never change X on Fridays": a team rule, stated as a habit
            add("team-rule", 0.15)
    imperative = bool(
        _IMPERATIVE.match(body)
        or _BARE_RULE.match(body)
        or re.search(r"\bplease\s+(always\s+|never\s+)?(" + _IMPERATIVE.pattern.split("(use|", 1)[1], body, re.I)
    )
    if imperative:
        add("imperative", 0.2)
    pref = bool(_PREFERENCE.search(body))
    if pref:
        add("preference", 0.5)
    proc = _PROCEDURE.match(body)
    if proc and (_IMPERATIVE.match(proc.group(2)) or _BARE_RULE.match(proc.group(2))):
        add("procedure", 0.35)
        if not imperative:
            imperative = True
            add("imperative", 0.2)
    if _DEFINE.search(body) and not _FIRST_STATUS.match(body):
        add("statement", 0.3)
    elif _WEAK_DEFINE.search(body) and not _FIRST_STATUS.match(body):
        add("weak-statement", 0.2)
    if ctx.correction or _CORRECTION.match(s) or _NOT_Y.search(body):
        add("correction", 0.3)
    if _FAIL.search(body) and _CAUSE.search(body):
        add("cause", 0.3)
    if ctx.acked and (imperative or modal or pref):
        add("acknowledged", 0.15)
    if ctx.fix:
        if _PROGRESS.match(body):
            return None
        add("fix", 0.35)
    values = {m.group(0) for m in VALUE.finditer(body)}
    if values:
        add("value", 0.15 if len(values) == 1 else 0.25)
    if _QUANT.search(body):
        add("general", 0.1)
        if imperative or modal:
            score += 0.1
    # what speaks against a lesson
    if _CHATTER.search(body) and len(P.content_words(body)) < 6:
        score -= 0.4
    if _SOCIAL.search(s):
        score -= 0.4
    if _DEICTIC_ONLY.match(body):
        return None
    if _FIRST_STATUS.match(body) and not pref:
        score -= 0.5
    if _ONE_OFF.search(body) and ("cue" not in cues or _TRANSIENT.search(body)):
        score -= 0.25
    if _TRANSIENT.search(body):
        score -= 0.25
    if re.search(r"\b(this|that|so)\s+(fast|good|helpful|great|well)\b|\bagain am i\b|\bget some rest\b", body, re.I):
        score -= 0.6
    if score <= 0:
        return None
    return score, cues, _kind(body, pref)


def _kind(body: str, pref: bool) -> str:
    if pref:
        return "preference"
    if re.match(r"^(to|when|if|whenever)\b", body, re.I) or re.search(r"\b(first|then|before re-?running|step)\b", body, re.I):
        return "procedure"
    if _MODAL.search(body) or _IMPERATIVE.match(body):
        return "rule"
    return "fact"


def _unique(items: list[Candidate]) -> list[Candidate]:
    seen: dict[str, Candidate] = {}
    for c in items:
        key = " ".join(sorted(P.content_words(c.statement)))
        if key not in seen or c.score > seen[key].score:
            seen[key] = c
    return list(seen.values())
