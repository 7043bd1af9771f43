"""A table of formats keyed by name and by media type: the one place a format is listed.

The HTTP server's OpenAPI content types and `format=` values, the CLI's `--format` choices and the
client's content types are all read from such a table, so registering a format is enough to make
it reachable everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class Format(Protocol):
    """What a registry needs of a format: a name and the media types that select it."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str:  # for help texts: "NDJSON", "Arrow"
        ...

    @property
    def media_type(self) -> str:  # the canonical one (a reply's Content-Type, a client's request header)
        ...

    @property
    def aliases(self) -> tuple[str, ...]:  # other media types that select it (Accept, Content-Type)
        ...


F = TypeVar("F", bound=Format)


class Registry(Generic[F]):
    """Formats of one kind (ingest decoders or result encoders), in registration order."""

    def __init__(self, what: str, formats: Iterable[F] = ()) -> None:
        self.what = what  # "ingest format", "result format": for error messages
        self._by_name: dict[str, F] = {}
        self._by_media: dict[str, F] = {}
        for f in formats:
            self.register(f)

    def register(self, fmt: F) -> F:
        """Add a format (its name and media types must be new); returns it."""
        media = (fmt.media_type, *fmt.aliases)
        taken = [m for m in media if m in self._by_media]
        if fmt.name in self._by_name or taken:
            raise ValueError(f"{self.what} '{fmt.name}' clashes with a registered one ({', '.join(taken) or fmt.name})")
        self._by_name[fmt.name] = fmt
        for m in media:
            self._by_media[m] = fmt
        return fmt

    def unregister(self, name: str) -> None:
        """Remove a format (tests that register a toy one undo it)."""
        fmt = self._by_name.pop(name)
        for m in [m for m, f in self._by_media.items() if f is fmt]:
            del self._by_media[m]

    def __getitem__(self, name: str) -> F:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[F]:
        return iter(list(self._by_name.values()))

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def media_types(self) -> tuple[str, ...]:
        """The canonical media type of every format, in registration order."""
        return tuple(f.media_type for f in self)

    def by_media_type(self, media_type: str) -> F | None:
        """The format a media type (canonical or alias; parameters and case ignored) selects."""
        return self._by_media.get(media_type.split(";")[0].strip().lower())

    def from_accept(self, accept: str | None) -> F | None:
        """The first format an Accept header names, by quality then order (None: it names none)."""
        if not accept:
            return None
        ranked = []
        for i, part in enumerate(accept.split(",")):
            bits = [b.strip() for b in part.split(";")]
            q = 1.0
            for b in bits[1:]:
                if b.startswith("q="):
                    try:
                        q = float(b[2:])
                    except ValueError:
                        q = 0.0
            ranked.append((-q, i, bits[0].lower()))
        for _, _, mt in sorted(ranked):
            if mt in self._by_media:
                return self._by_media[mt]
        return None


__all__ = ["Format", "Registry"]
