"""JSON in and out of the API: strict parsing, clipped error messages, safe rendering.

Why: Python's ``json`` accepts ``Infinity``/``NaN`` and turns ``1e400`` into ``inf``, which
RFC 8259 JSON has no way to say; such a value stored once made every later read of the
target fail to render (500). Parsing also recursed once per nesting level (RecursionError,
500) and error messages echoed whole values (a 10 MB field came back as a 10 MB 422).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from starlette.responses import JSONResponse

from autoscaler.errors import ConfigError
from autoscaler.logging import get_logger

log = get_logger(__name__)

MAX_DEPTH: Final = 32  # a target document nests 6 levels; 32 leaves room, bounds the walk
MAX_PROBLEMS: Final = 50
PROBLEM_HEAD_CHARS: Final = 200
PROBLEM_TAIL_CHARS: Final = 120


JSON_MEDIA_TYPES: Final = frozenset({"application/json", "application/merge-patch+json"})


class UnsupportedMediaType(ValueError):
    """A body declared as something other than JSON (HTTP 415)."""


def check_json_media_type(content_type: str | None) -> None:
    """A JSON endpoint takes ``application/json``, ``application/merge-patch+json`` or
    any ``+json`` type; no Content-Type at all is read as JSON (curl without -H)."""
    if content_type is None or not content_type.strip():
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_MEDIA_TYPES or (media.startswith("application/") and media.endswith("+json")):
        return
    shown = content_type if len(content_type) <= 80 else content_type[:80] + "..."
    raise UnsupportedMediaType(
        f"Content-Type: value {shown!r} is not JSON; send application/json "
        "(or application/merge-patch+json for PATCH)"
    )


class BodyTooDeep(ValueError):
    """Nesting beyond `MAX_DEPTH` (HTTP 400)."""


class _NonFinite:
    """Placeholder for a number JSON cannot carry, keeping its source text for the message."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def parse_json(raw: bytes, *, root: str = "") -> Any:
    """Decode a request body or raise: `BodyTooDeep` (400) for nesting, `ConfigError` (422)
    naming each non-finite number's field, or for text that is not JSON."""
    if not raw:
        raise ConfigError("invalid body", ["body: empty; expected a JSON object"])
    try:
        doc = json.loads(raw, parse_float=_parse_float, parse_constant=_NonFinite)
    except RecursionError:
        raise BodyTooDeep(f"body: JSON nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError("invalid body", [clip(f"body: not valid JSON ({err})")]) from None
    problems = _walk(doc, root)
    if problems:
        raise ConfigError("invalid body", problems)
    return doc


def _walk(doc: Any, root: str) -> list[str]:
    """Iterative (never recursive): depth check and the path of every non-finite number."""
    problems: list[str] = []
    stack: list[tuple[str, Any, int]] = [(root, doc, 1)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, _NonFinite):
            field = path or "body"
            problems.append(
                clip(
                    f"{field}: value {value.text} must be a finite number "
                    "(JSON has no Infinity or NaN, and a double ends near 1.8e308)"
                )
            )
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise BodyTooDeep(f"body: JSON nested deeper than {MAX_DEPTH} levels at {path!r}")
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((f"{path}.{key}" if path else str(key), item, depth + 1))
        else:
            for i, item in enumerate(value):
                stack.append((f"{path}[{i}]", item, depth + 1))
    return sorted(problems)


def clip(problem: str) -> str:
    """Keep the head (field and the start of the value) and the tail (the rule, or the end
    of the value) of a long message; the elided middle is counted."""
    limit = PROBLEM_HEAD_CHARS + PROBLEM_TAIL_CHARS + 40
    if len(problem) <= limit:
        return problem
    elided = len(problem) - PROBLEM_HEAD_CHARS - PROBLEM_TAIL_CHARS
    head, tail = problem[:PROBLEM_HEAD_CHARS], problem[-PROBLEM_TAIL_CHARS:]
    return f"{head}... ({elided} characters elided) ...{tail}"


def clip_problems(problems: list[str]) -> list[str]:
    """At most `MAX_PROBLEMS` messages, each clipped; the rest counted, never dropped
    silently (the document is rejected whole either way)."""
    out = [clip(str(p)) for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        out.append(f"... and {len(problems) - MAX_PROBLEMS} more problems")
    return out


def _finite_copy(value: Any) -> Any:
    """The document with every non-finite float as null, as FastAPI's own encoder renders
    them (iterative copy)."""
    holder: dict[Any, Any] = {}
    stack: list[tuple[Any, Any, Any]] = [(value, holder, "root")]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            new: Any = None
        elif isinstance(item, dict):
            new = dict.fromkeys(item)  # keeps the key order
            stack.extend((v, new, k) for k, v in item.items())
        elif isinstance(item, list | tuple):
            new = [None] * len(item)
            stack.extend((v, new, i) for i, v in enumerate(item))
        else:
            new = item
        parent[key] = new
    return holder["root"]


def render_json(content: Any) -> bytes:
    """Strict JSON bytes; a non-finite number that reached a stored document or a decision
    by any path becomes null (logged) instead of failing the whole answer with a 500."""
    try:
        return _dumps(content)
    except ValueError:
        log.warning("api_non_finite_value_rendered_as_null")
        return _dumps(_finite_copy(content))


def _dumps(content: Any) -> bytes:
    return json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


class SafeJSONResponse(JSONResponse):
    """`JSONResponse` rendered by `render_json`."""

    def render(self, content: Any) -> bytes:
        return render_json(content)
