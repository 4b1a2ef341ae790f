"""Store timestamps (epoch milliseconds) to and from what an operator types."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_time(value: str) -> int:
    """Epoch milliseconds, or an ISO 8601 date/time (UTC when no zone is given)."""
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not epoch milliseconds or an ISO 8601 time: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def iso(ms: int | None) -> str:
    if ms is None:
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"<{ms}>"
