"""``If-Match`` per RFC 9110 section 13.1.1, strict so that no header means "unconditional".

``*`` matches when the target exists; a list of entity-tags matches when any equals the
current one under strong comparison. Our ETags are always strong (``"<version>"``), so a
weak tag (``W/"7"``) can never match and is refused as a client error rather than failing
every write with 412; so is anything that is not a quoted tag (``7``, ``""``, a blank
header). A malformed header is 400, never silently dropped, because dropping it would turn
a conditional write into an unconditional one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from autoscaler.errors import PermanentError

# etagc = "!" / %x23-7E / obs-text; at least one character (an empty tag matches nothing).
_TAG: Final = re.compile(r'"([\x21\x23-\x7e\x80-\xff]+)"')


class MalformedIfMatch(PermanentError):
    """The If-Match header does not parse (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class IfMatch:
    """A parsed header: ``any_version`` for ``*``, else the versions (ETags unquoted)."""

    any_version: bool = False
    versions: tuple[str, ...] = ()

    def matches(self, current: str | None) -> bool:
        """``current`` is the stored version, None when the target does not exist."""
        if current is None:
            return False
        return self.any_version or current in self.versions

    def describe(self) -> str:
        return "*" if self.any_version else ", ".join(f'"{v}"' for v in self.versions)


def parse_if_match(values: list[str]) -> IfMatch | None:
    """All If-Match field lines of a request (a list may span lines); None when absent."""
    if not values:
        return None
    joined = ",".join(values)
    if joined.strip() == "*":
        return IfMatch(any_version=True)
    versions: list[str] = []
    for element in joined.split(","):
        part = element.strip()
        if not part:
            continue  # RFC 9110 5.6.1: empty list elements are ignored
        if part == "*":
            raise MalformedIfMatch(
                f'If-Match: value {_shown(joined)} mixes "*" with entity-tags; '
                'send either "*" (the target must exist) or a list of ETags'
            )
        if part.startswith("W/"):
            raise MalformedIfMatch(
                f"If-Match: value {_shown(part)} is a weak entity-tag; If-Match uses strong "
                "comparison (RFC 9110 13.1.1), so it could never match: send the ETag "
                "exactly as returned"
            )
        m = _TAG.fullmatch(part)
        if m is None:
            raise MalformedIfMatch(
                f'If-Match: value {_shown(part)} is not an entity-tag; expected "*" or a '
                'comma-separated list of quoted ETags such as "12" (an empty "" is not one)'
            )
        versions.append(m.group(1))
    if not versions:
        raise MalformedIfMatch(
            'If-Match: empty; expected "*" or a quoted ETag (omit the header for an '
            "unconditional write)"
        )
    return IfMatch(versions=tuple(versions))


def _shown(value: str, limit: int = 80) -> str:
    return repr(value if len(value) <= limit else f"{value[:limit]}...")
