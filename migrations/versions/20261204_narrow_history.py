"""narrowing reaches history: every memory version keeps the narrowest scope given its memory since

Issue 41 (H1). From this revision on, a version written with a narrower scope narrows the other
versions of its root at write time (app/memories/narrowing.py): written in main, every version in
main and in every branch; written in a branch, that branch's own. This data migration applies the
same rule to the rows already in a database: each version's scope becomes the meet
(app.kit.tenancy.scope.meet: private wins with the row's owner, groups intersect, labels union) of its own
scope and the scope of every version of its root recorded at or after it in main or in its own
branch. Run as the tables' owner, so it reaches every org, scope and branch.

Downgrade does nothing: the narrowed scopes are kept. Which rows were wider before cannot be told
afterwards, and widening them back would re-publish what owners had made private; widening is an
explicit, audited `declassify`.

Revision ID: 0021
Revises: 0020
"""

from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_ROWS = """
SELECT m.id, m.org_id, m.root_id, m.branch_id, m.owner_id, m.visibility, m.groups, m.labels, m.recorded_at
FROM memories m
WHERE (m.org_id, m.root_id) IN (SELECT org_id, root_id FROM memories GROUP BY org_id, root_id HAVING count(*) > 1)
ORDER BY m.org_id, m.root_id, m.recorded_at, m.id"""
_SET = "UPDATE memories SET visibility = :v, groups = :g, labels = :l WHERE org_id = :o AND id = :i"


def narrowed(rows) -> list[tuple]:
    """(org_id, id, scope) of the rows of one root whose scope the rule narrows."""
    from app.kit.tenancy.scope import meet, of

    out = []
    for r in rows:
        kept = of(r)
        for w in rows:
            if w.id != r.id and w.recorded_at >= r.recorded_at and (w.branch_id is None or w.branch_id == r.branch_id):
                kept = meet(kept, of(w), owner_id=r.owner_id)
        if (kept.visibility, set(kept.groups), set(kept.labels)) != (r.visibility, set(r.groups), set(r.labels)):
            out.append((r.org_id, r.id, kept))
    return out


def upgrade() -> None:
    conn = op.get_bind()
    roots = defaultdict(list)
    for r in conn.execute(sa.text(_ROWS)):
        roots[(r.org_id, r.root_id)].append(r)
    for rows in roots.values():
        for org_id, id_, s in narrowed(rows):
            conn.execute(sa.text(_SET), {"v": s.visibility, "g": list(s.groups), "l": list(s.labels), "o": org_id, "i": id_})


def downgrade() -> None:
    """Nothing: narrowed scopes stay narrowed (see the module docstring)."""
