"""The base of tritontune's enums: members that are their text.

Python 3.11's ``StrEnum`` behaves so, but tritontune supports 3.10: ``str()``, f-strings and hashing
all use the value, so a member and the text a user typed (or a study stored) are the same key.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __hash__(self) -> int:
        return str.__hash__(self)
