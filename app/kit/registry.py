"""Every model module imported, so that Base.metadata is complete (alembic, tests); and the item
types of app/kit/items.py bound to their models, for search, lineage, memory sources and anything
else that loads items of several types.

The one module of app/kit that imports domain models: it wires them together, nothing imports
it back from a model.
"""

from __future__ import annotations

from app.audit import models as _audit  # noqa: F401
from app.branches import models as _branches  # noqa: F401
from app.cartridges import models as _cartridges  # noqa: F401
from app.embedders import models as _embedders  # noqa: F401
from app.episodes import models as _episodes  # noqa: F401
from app.feedback import models as _feedback  # noqa: F401
from app.jobs import models as _jobs  # noqa: F401
from app.kit.database.base import Base
from app.kit.http import idempotency_models as _idempotency  # noqa: F401
from app.kit.http import ratelimit_models as _ratelimit  # noqa: F401
from app.kit.items import ITEM_TYPES, SOURCE_TYPES  # noqa: F401 - the table, read here with its models
from app.kit.tenancy import view_models as _view  # noqa: F401
from app.knowledge import models as _knowledge  # noqa: F401
from app.lineage import models as _lineage  # noqa: F401
from app.manager import models as _manager  # noqa: F401
from app.memories import models as _memories  # noqa: F401
from app.orgs import models as _orgs  # noqa: F401
from app.search import models as _search  # noqa: F401
from app.sessions import models as _sessions  # noqa: F401

metadata = Base.metadata


def model_of(type_: str) -> type:
    return ITEM_TYPES[type_].model


def text_of(type_: str, row) -> str:
    """The text of a loaded row (ORM object or a row of its columns) of an item type."""
    col = ITEM_TYPES[type_].text_col
    if col is None:  # a cartridge has no text of its own
        return f"cartridge p={row.p} ({row.status})"
    return getattr(row, col) or ""
