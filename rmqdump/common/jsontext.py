"""The one JSON spelling of every JSON Lines row rmqdump writes: UTF-8 as is, no spaces (encoder built once)."""

from __future__ import annotations

import dataclasses
import json

encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def fields_of(obj, omit: tuple[str, ...] = (), rename: dict[str, str] | None = None) -> dict:
    """A dataclass's fields by name (or the name `rename` gives), in declaration order, values as they are (not
    copied): a row whose columns are the fields is then spelled where they are declared, once, not listed again."""
    rename = rename or {}
    return {rename.get(f.name, f.name): getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name not in omit}
