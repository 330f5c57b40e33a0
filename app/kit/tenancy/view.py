"""Which state of an org's memory a request reads: main now, main as of an instant, or a branch
. The one place that turns a view into SQL, used by the access helper (`visible_to`)
and by the org-level reads of pipelines.

A view is a stack of layers, nearest first. Each layer is the rows written in one branch (main's
`branch_id` is NULL) as they stood at the layer's cutoff (None: now). A branch forked from main at
t sees its own rows now, then main's rows as of t; a branch of a branch adds one layer. A row of a
lower layer is hidden by a *mask* of a nearer one (`branch_masks`): the branch wrote a new version
of that memory root, or deleted that item. Branches copy nothing when they are made: a branch is
one row (its parent and fork instant), so creating one is O(1).

Time: a memory version belongs to the state at instant c when it was recorded by c and not yet
superseded at c (`recorded_at <= c < superseded_at`); an episode or a lineage edge when it existed
by c. Deletion is not history: deleted rows are gone (retention, erasure, DELETE), so neither an
as-of read nor a branch ever shows what has since been deleted. Quarantine is today's rule too.

Row-level security backs this up in the database (migration 0013): a transaction sees main's rows
and those of the branches of its view only, and may write only into its own branch (main: into
main), so a branch write that forgot its branch fails instead of changing main.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class Layer:
    branch_id: uuid.UUID | None  # None: main
    cutoff: datetime | None = None  # None: now


@dataclass(frozen=True)
class View:
    layers: tuple[Layer, ...] = (Layer(None),)
    branch: str | None = None  # the branch's name (None: main)
    every_branch: bool = False  # erasure and retention: every branch's rows, no time filter

    @property
    def branch_id(self) -> uuid.UUID | None:
        """The branch that this view's writes go to (None: main)."""
        return self.layers[0].branch_id

    @property
    def as_of(self) -> datetime | None:
        return self.layers[0].cutoff

    @property
    def is_plain(self) -> bool:
        """Main, now: every row of main, no time filter (the common case costs one IS NULL)."""
        return not self.every_branch and self.layers == (Layer(None),)

    def at(self, instant: datetime | None) -> View:
        """The same view as it stood at `instant` (every layer cut no later than it)."""
        if instant is None:
            return self
        return replace(
            self,
            layers=tuple(
                Layer(layer.branch_id, instant if layer.cutoff is None else min(layer.cutoff, instant)) for layer in self.layers
            ),
        )

    def below(self) -> View:
        """The state this branch forked from (its layers but its own)."""
        return View(layers=self.layers[1:]) if len(self.layers) > 1 else self

    def branch_ids(self) -> list[uuid.UUID]:
        return [layer.branch_id for layer in self.layers if layer.branch_id is not None]


MAIN = View()
EVERY_BRANCH = View(every_branch=True)
