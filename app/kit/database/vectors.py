"""Vectors sent to PostgreSQL in pgvector's binary form, for the statements that write many.

pgvector's SQLAlchemy type binds a vector as text: every float is printed in Python (its shortest
repr) and parsed again by the server, about 0.4 ms of the writer's time per 384-dim vector, holding
the GIL that the embedding thread beside it needs. `PackedVector` binds the same float32 values as
pgvector's binary wire format instead (a 4-byte header, then big-endian float32s: the bytes
`vector_recv` reads), so a stored vector is bit for bit what the text form gives. The parameter
goes out with no type of its own; the server takes the target column's type (a vector column, or
a `CAST(... AS vector)`), whose binary input is pgvector's.
"""

from __future__ import annotations

import struct

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy.types import UserDefinedType


class Packed(bytes):
    """A vector in pgvector's binary wire format."""


class _PackedDumper(Dumper):
    format = Format.BINARY  # oid 0: the server infers the parameter's type from where it goes

    def dump(self, obj: Packed) -> bytes:
        return bytes(obj)


psycopg.adapters.register_dumper(Packed, _PackedDumper)


def pack(vector) -> Packed | None:
    """`vector` (a sequence of floats) as pgvector's binary input: dimensions, unused, float32s."""
    if vector is None:
        return None
    v = np.asarray(vector, dtype=">f4").reshape(-1)
    return Packed(struct.pack(">HH", v.shape[0], 0) + v.tobytes())


class PackedVector(UserDefinedType):
    """A bind parameter's type for a vector column, sent binary (see the module docstring)."""

    cache_ok = True

    def get_col_spec(self, **kw) -> str:
        return "vector"

    def bind_processor(self, dialect):
        return pack
