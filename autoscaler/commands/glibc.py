"""The C library's allocator knobs the controller and its scrape workers use, where the C
library is glibc (elsewhere, musl or macOS, each is a no-op that says so).

- `malloc_trim`: hands malloc's whole free pages back to the system (the controller every
  `commands.run.TRIM_PERIOD_S`, a worker when idle).
- `limit_malloc_arenas`: one malloc arena for the whole process. glibc gives each thread
  that allocates while another holds the lock an arena of its own (up to 8 per core), and
  a freed chunk stays in its arena: the threads that build the controller's /metrics page
  (1.8 MB at 1,000 targets) and run `asyncio.to_thread` work left ~10 MB free and
  unreturnable there, `malloc_trim` included. Side by side at 1,000 targets
  (benchmarks/bench_rss.py, docs/scale.md "Session 6"): one process 298.9 -> 290.5 MB,
  with 2 scrape workers the controller 245.4 -> 233.6 MB. The threads allocate little
  and seldom, so sharing one arena's lock should cost little; its CPU has not been
  measured side by side yet. A user's own ``MALLOC_ARENA_MAX`` (read by glibc at start)
  is left as set.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

# <malloc.h>: mallopt's parameter number for the arena limit
M_ARENA_MAX: Final = -8
ARENAS: Final = 1


def libc_function(name: str, argtypes: list[Any], restype: Any) -> Callable[..., int] | None:
    """glibc's function ``name`` as a ctypes call, None where there is no such C library
    or function."""
    try:
        function = getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function  # type: ignore[no-any-return]


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` as a call, None where the C library is not glibc."""
    trim = libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return None if trim is None else (lambda: trim(0))


def limit_malloc_arenas(environ: Mapping[str, str] = os.environ) -> bool:
    """Limit malloc to `ARENAS` arena(s), before the process starts its threads (a thread
    that already has an arena keeps it). False when it did nothing: ``MALLOC_ARENA_MAX``
    is set in ``environ`` (the user's choice stands), or the C library is not glibc."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    mallopt = libc_function("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    return mallopt is not None and mallopt(M_ARENA_MAX, ARENAS) == 1
