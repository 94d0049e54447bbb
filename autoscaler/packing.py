"""Exact, compact bytes for number columns kept for a while (issue 16: memory at fleet
scale): the histories' sealed blocks (`control/history.py`) and a pod window's middle
rows (`metrics/signals.py`).

Every array's bytes are transposed (byte 0 of every value, then byte 1 ...), so the
sign, exponent and high mantissa bytes, which vary little between neighbouring values
of a column or between a counter's consecutive readings, sit together; then zlib at
level 1 (the fastest). Unpacking gives back the same bytes: every value bit for bit.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence
from typing import Any

LEVEL = 1


def _transposed(col: array[Any]) -> bytes:
    data = col.tobytes()
    k = col.itemsize
    return data if k == 1 else b"".join(data[j::k] for j in range(k))


def _untransposed(data: bytes, k: int) -> bytes | bytearray:
    if k == 1:
        return data
    n = len(data) // k
    out = bytearray(len(data))
    for j in range(k):
        out[j::k] = data[j * n : (j + 1) * n]
    return out


def pack(arrays: Sequence[array[Any]]) -> bytes:
    """The arrays' values, transposed and compressed (see `unpack`)."""
    return zlib.compress(b"".join(_transposed(a) for a in arrays), LEVEL)


def unpack(blob: bytes, codes: Sequence[str], n: int) -> list[array[Any]]:
    """The arrays `pack` was given: their typecodes ``codes``, ``n`` values each."""
    raw = zlib.decompress(blob)
    arrays: list[array[Any]] = []
    pos = 0
    for code in codes:
        col = array(code)
        end = pos + col.itemsize * n
        col.frombytes(_untransposed(raw[pos:end], col.itemsize))
        arrays.append(col)
        pos = end
    return arrays


# One row of a few hundred bytes: raw deflate (no header, no checksum) with a 512-byte
# window and the least memory, ~20% faster than zlib.compress for this size
_ROW_WBITS, _ROW_MEMLEVEL = -9, 1


def pack_floats(row: array[float]) -> bytes:
    """One ``array('d')`` of a few hundred values, packed (`unpack_floats`)."""
    z = zlib.compressobj(LEVEL, zlib.DEFLATED, _ROW_WBITS, _ROW_MEMLEVEL)
    return z.compress(_transposed(row)) + z.flush()


def unpack_floats(blob: bytes) -> array[float]:
    out = array("d")
    out.frombytes(_untransposed(zlib.decompress(blob, _ROW_WBITS), out.itemsize))
    return out
