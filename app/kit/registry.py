"""Import every model module so Base.metadata is complete (alembic, tests)."""

from app.audit import models as _audit  # noqa: F401
from app.cartridges import models as _cartridges  # noqa: F401
from app.episodes import models as _episodes  # noqa: F401
from app.jobs import models as _jobs  # noqa: F401
from app.knowledge import models as _knowledge  # noqa: F401
from app.lineage import models as _lineage  # noqa: F401
from app.memories import models as _memories  # noqa: F401
from app.orgs import models as _orgs  # noqa: F401
from app.sessions import models as _sessions  # noqa: F401
from app.kit import ratelimit_models as _ratelimit  # noqa: F401
from app.kit.base import Base

metadata = Base.metadata
