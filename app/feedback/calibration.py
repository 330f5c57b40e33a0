"""Where the useful part of an org's contexts ends, learnt from the feedback on them.

Data: the feedback on `/v1/context` retrievals among the org's latest WINDOW feedback events,
each joined with what that retrieval handed out (type, id, score, section; app/lineage retrieval records). One
observation per (retrieval, user): the items any of that user's events on it named, with any
signal (`used`, `helpful`, `wrong`, `outdated`: the user read the item and acted on it), are
*engaged*; the other items handed out are not. A flipped helpful/wrong does not change whether an
item was engaged, so noisy helpfulness leaves the calibration as it is.

Feature: an item's score relative to the top retrieved score of its context, in BINS bins
(bin 0: relative score in (0.9, 1]). For each bin b, the *tail estimate* is the chance that an item
at bin b or below is engaged: (sum of w * f + 1) / (sum of w + 2), f being an observation's
engaged share among its items in those bins, w its user's weight (a Beta(1, 1) prior: 0.5 without
data, so a tail nobody has reported on is never cut).

Bounded influence: a user with n observations has weight min(1, USER_CAP / n) on each, so all of
one key's feedback together weighs at most USER_CAP observations; with W the weight of everyone
else's observations at a bin, that key moves its estimate by at most USER_CAP / (W + USER_CAP + 2)
(`one_user_bound`). The calibration is used only with observations from at least MIN_USERS
distinct users and at least MIN_OBSERVATIONS in all: below that, contexts are exactly as without
feedback. It only ever removes items from the tail of a context (app/context/assemble.py `trim`):
feedback never brings an item into view.

Exploration: a cut context hands out no tail, so its feedback says nothing about the tail, and a
cut resting on such feedback alone would lapse once the observations behind it left the window,
then re-form (a cycle of about WINDOW events). So while a cut is in force, an EXPLORE share of
contexts, chosen by a hash of the retrieval id (`explores`: the same retrieval is always served the
same way), is served whole; each context's record says which cut it was served with (`cut` in its
params, None for a whole one). The tail estimates read only the observations of whole contexts:
which contexts are whole depends on the retrieval id and on earlier feedback, never on what this
context's reader engages with, so those observations are an unbiased sample of all contexts (an
observation of a cut context would overstate how often a tail is engaged: its unused items are
missing). Every observation still counts towards `users` and `observations` (the org gives
feedback; `active`).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.feedback import repository as repo

BINS = 10
WINDOW = 1000  # latest feedback events read
USER_CAP = 20.0  # observations' worth of weight one user's feedback can carry, whatever its volume
MIN_USERS = 3
MIN_OBSERVATIONS = 20
MIN_TAIL_WEIGHT = 5.0  # a tail is cut only on at least this much weighted evidence about it
THRESHOLD = 0.25  # a tail whose items are engaged less often than this is left out (docs/feedback.md: how it was fitted)
FLOOR = 3  # retrieved items always kept, whatever the calibration says
# Contexts served whole while a cut is in force: enough that a window of WINDOW events holding
# at least 100 events of feedback on contexts keeps MIN_TAIL_WEIGHT whole observations about the
# tail; few enough that the whole contexts give up only a twentieth of the tokens the cut saves.
EXPLORE = 0.05


@dataclass(frozen=True)
class Calibration:
    tail: tuple[float, ...]  # tail estimate per bin (len BINS)
    weight: tuple[float, ...]  # weight of the observations behind each tail estimate
    users: int
    observations: int

    @property
    def active(self) -> bool:
        return self.users >= MIN_USERS and self.observations >= MIN_OBSERVATIONS

    def cut_bin(self, threshold: float | None = None) -> int | None:
        """The first bin (b >= 1) whose tail is engaged less often than `threshold` (default
        THRESHOLD) on enough evidence: items at that bin or below are left out. None: nothing is cut."""
        threshold = THRESHOLD if threshold is None else threshold
        if not self.active:
            return None
        for b in range(1, BINS):
            if self.weight[b] >= MIN_TAIL_WEIGHT and self.tail[b] < threshold:
                return b
        return None


def bin_of(score: float, top: float) -> int:
    """An item's bin by its score relative to the top score (0: within 10 % of the top)."""
    if top <= 0:
        return 0
    rel = max(0.0, min(1.0, score / top))
    return min(BINS - 1, int((1.0 - rel) * BINS))


def one_user_bound(others_weight: float) -> float:
    """The most one user's feedback moves a tail estimate whose other observations weigh `others_weight`."""
    return USER_CAP / (others_weight + USER_CAP + 2.0)


def explores(retrieval_id: uuid.UUID) -> bool:
    """Whether the context recorded as `retrieval_id` is served whole while a cut is in force (an
    EXPLORE share of retrieval ids, by a hash of the id: reproducible for the same record)."""
    h = int.from_bytes(hashlib.blake2b(retrieval_id.bytes, digest_size=8).digest(), "big")
    return h < EXPLORE * 2.0**64


def served(cut: int | None, retrieval_id: uuid.UUID) -> int | None:
    """The cut a context recorded as `retrieval_id` is served with: `cut`, or None (whole) for the
    exploration share."""
    return None if cut is None or explores(retrieval_id) else cut


Observation = tuple  # (user, bins, engaged, whole: the context was served without a cut)


def observations(rows) -> list[Observation]:
    """(user, bins, engaged, whole) per (retrieval, user) from rows of (retrieval id, user id, the
    event's items, the retrieval's items, the retrieval's params): a user's several events on one
    retrieval are one; `whole` unless the record says it was served with a cut."""
    named: dict[tuple, set[str]] = {}
    handed: dict = {}
    for rid, actor, ev_items, ret_items, params in rows:
        named.setdefault((rid, actor), set()).update(str(i.get("id")) for i in ev_items or ())
        handed[rid] = (ret_items or [], (params or {}).get("cut") is None)
    out = []
    for (rid, actor), ids in named.items():
        ret_items, whole = handed[rid]
        items = [i for i in ret_items if i.get("id") and isinstance(i.get("score"), int | float)]
        if not items:
            continue
        top = max(float(i["score"]) for i in items)
        out.append((actor, [bin_of(float(i["score"]), top) for i in items], [str(i["id"]) in ids for i in items], whole))
    return out


def fit(obs: list[Observation]) -> Calibration:
    """The tail estimates of observations (see the module's docstring): all count towards `users`
    and `observations`, those of whole contexts towards the tails (each user's share of them capped)."""
    users = {o[0] for o in obs}
    whole = [o for o in obs if o[3]]
    per_user: dict = {}
    for o in whole:
        per_user[o[0]] = per_user.get(o[0], 0) + 1
    num, den = [0.0] * BINS, [0.0] * BINS
    for actor, bins, engaged, *_ in whole:
        w = min(1.0, USER_CAP / per_user[actor])
        for b in range(BINS):
            tail = [e for x, e in zip(bins, engaged) if x >= b]
            if tail:
                num[b] += w * sum(tail) / len(tail)
                den[b] += w
    tail_est = tuple((n + 1.0) / (d + 2.0) for n, d in zip(num, den))
    return Calibration(tail_est, tuple(den), len(users), len(obs))


def of_org(db: Session, org_id: uuid.UUID) -> Calibration:
    """The org's calibration from its latest feedback on contexts (org-wide: every member's
    feedback, each bounded; never another org's)."""
    return fit(observations(repo.context_feedback(db, org_id, WINDOW)))


CACHED_ORGS = 256
_cache: dict[uuid.UUID, tuple[tuple, Calibration]] = {}


def context_cut(db: Session, org_id: uuid.UUID) -> int | None:
    """The bin from which a context of this org leaves retrieved items out (None: keep all). The
    calibration is kept per org in this process while the org's latest WINDOW feedback events are
    unchanged (`repo.stamp`: an added, erased or cascaded event changes it), so a context pays one
    read of at most WINDOW index entries, whatever the org's history, and an org without feedback
    one empty probe."""
    now = repo.stamp(db, org_id, WINDOW)
    if not now[0]:
        return None
    got = _cache.get(org_id)
    if got is None or got[0] != now:
        got = (now, of_org(db, org_id))
        if len(_cache) >= CACHED_ORGS:
            _cache.pop(next(iter(_cache)))
        _cache[org_id] = got
    return got[1].cut_bin()
