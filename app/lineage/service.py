"""Writing lineage edges (reading them is the compliance issue's /v1/lineage)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.lineage.models import LineageEdge


def add_edge(db: Session, *, org_id: uuid.UUID, from_type: str, from_id: uuid.UUID, to_type: str,
             to_id: uuid.UUID, relation: str, job_id: uuid.UUID | None = None) -> None:
    db.add(LineageEdge(org_id=org_id, from_type=from_type, from_id=from_id, to_type=to_type, to_id=to_id,
                       relation=relation, job_id=job_id))
