"""Counts in the output's words: "1 container", "2 containers", "1 entry", "3 launches"."""
from __future__ import annotations

#: Nouns whose plural is not the noun + "s".
_IRREGULAR = {"entry": "entries", "launch": "launches", "match": "matches", "process": "processes",
              "miss": "misses", "lacks": "lack", "index": "indexes"}


def plural(count: int, noun: str) -> str:
    """'1 image', '0 images', '2 entries'."""
    return f"{count} {noun if count == 1 else _IRREGULAR.get(noun, noun + 's')}"


__all__ = ["plural"]
