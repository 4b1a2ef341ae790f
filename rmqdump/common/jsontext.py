"""The one JSON spelling of every JSON Lines row rmqdump writes: UTF-8 as is, no spaces (encoder built once)."""

from __future__ import annotations

import json

encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
