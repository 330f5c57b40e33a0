from __future__ import annotations

from pgvector.sqlalchemy import Vector
from sqlalchemy import Text
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import EMBEDDING_DIM, Base, TenantMixin


class Lexeme(TenantMixin, Base):
    """The org's vocabulary: one embedded surface word per lexeme its episodes hold, for the
    vocabulary lift of hybrid ranking (app/search/lexicon.py). Written at ingest; read only
    joined with the lexemes of the rows the caller may be served, so a word of a row the caller
    cannot see never shapes their ranking; a lexeme no row holds any more goes with the last row
    that held it (app/erasure/service.py)."""

    __tablename__ = "lexicon"

    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    word: Mapped[str] = mapped_column(Text, nullable=False)
    embedding = mapped_column(Vector(EMBEDDING_DIM), nullable=False)
