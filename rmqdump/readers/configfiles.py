"""The broker's config/*.json files, as fastjson writes them.

fastjson serialises a Map<Integer, Long> with bare integer keys
(`{0:123,1:136}`), which is not JSON. The reader quotes such keys outside
string literals, then parses normally. Each file has a `.bak` twin that the
broker writes first (ConfigManager.persist), so the two may disagree after a crash.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from rmqdump.common.problems import InputError, Problem

CONFIG_DIR = "config"
MAX_DEPTH = 256  # the broker's config files nest a few levels; deeper is damage, and Python's parser would recurse out of stack


def quote_integer_keys(text: str) -> str:
    """Quote bare integer object keys (`{0:1}` -> `{"0":1}`), leaving string contents alone."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    expect_key = False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_str = False
            i += 1
            continue
        if ch == '"':
            in_str = True
            expect_key = False
            out.append(ch)
            i += 1
            continue
        if ch in "{,":
            expect_key = True
            out.append(ch)
            i += 1
            continue
        if expect_key and (ch.isdigit() or ch == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append('"' + text[i:j] + '"')
                i = j
                expect_key = False
                continue
        if not ch.isspace():
            expect_key = False
        out.append(ch)
        i += 1
    return "".join(out)


def nesting_too_deep(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The character position of the first `[` or `{` (outside strings) nested deeper than `limit`, or None."""
    depth = 0
    in_str = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return i
        elif ch in "]}":
            depth -= 1
        i += 1
    return None


def _loads(text: str, quoted: str) -> Any:
    """json.loads of the quoted text; nesting deeper than MAX_DEPTH (or than the parser's stack) is a JSONDecodeError at
    its position in `quoted`, never a RecursionError."""
    deep = nesting_too_deep(quoted)
    if deep is not None:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", quoted, deep)
    try:
        return json.loads(quoted)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep to parse", quoted, 0) from None


def loads_fastjson(text: str) -> Any:
    """fastjson's text parsed (bare integer keys quoted); damage, too deep nesting included, is a json.JSONDecodeError."""
    return _loads(text, quote_integer_keys(text))


@dataclass
class ConfigFile:
    """One config file as found: its parsed content, or why it could not be parsed."""

    path: str
    size: int
    data: Any = None
    error: str | None = None
    offset: int | None = None  # the byte of the file where the error is, when one applies

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "ok": self.error is None, "error": self.error}


def read_config(path: str) -> ConfigFile:
    """Parse one config file; a parse failure is kept on the result, not raised."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError("unreadable", path, e.strerror or str(e)) from None
    cf = ConfigFile(path, len(raw))
    if not raw.strip():
        cf.error = "empty file"
        return cf
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        cf.error, cf.offset = f"not UTF-8 at byte {e.start}", e.start
        return cf
    quoted = quote_integer_keys(text)
    try:
        cf.data = _loads(text, quoted)
    except json.JSONDecodeError as e:
        cf.offset = _file_byte(text, quoted, e.pos)
        cf.error = f"not JSON: {e.msg} at byte {cf.offset}"
    return cf


def _file_byte(text: str, quoted: str, pos: int) -> int:
    """The file's byte offset of character `pos` of the quoted text (quote_integer_keys only inserts '"' around keys, never
    where the text has one; a character may be several UTF-8 bytes)."""
    i = 0
    for j in range(min(pos, len(quoted))):
        if i < len(text) and quoted[j] == text[i]:
            i += 1
    return len(text[:i].encode("utf-8"))


BAD_CONFIG = "bad_config"
JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
JAVA_INT = (-(1 << 31), (1 << 31) - 1)


def bad_config(path: str, detail: str, offset: int | None = None) -> Problem:
    """The finding `bad_config` about a config file (a file that does not parse, or an entry of the wrong shape)."""
    return Problem(BAD_CONFIG, path, offset, detail)


def problem_of(cf: ConfigFile) -> Problem:
    """A config file that does not parse, as the finding bad_config at the byte where it stops."""
    return bad_config(cf.path, cf.error or "", cf.offset)


def json_kind(value: Any) -> str:
    """A JSON value's kind as a message names it ("null", "list", "str", ...)."""
    return "null" if value is None else type(value).__name__


def config_table(data: Any, name: str) -> tuple[dict, list[str]]:
    """The object a parsed config file keeps under `name` (offsetTable, subscriptionGroupTable, ...): ({}, []) when the
    file has none; ({}, [why]) when the file or the table is not a JSON object."""
    if not isinstance(data, dict):
        return {}, [f"not a JSON object but {json_kind(data)}"]
    table = data.get(name, {})
    if not isinstance(table, dict):
        return {}, [f"{name} is not an object but {json_kind(table)}"]
    return table, []


def whole_number(value: Any, lo: int, hi: int) -> str | None:
    """Why `value` is not what fastjson writes for a Java integer in [lo, hi] (a JSON integer), or None when it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{json.dumps(value)[:40]} is not an integer"
    if not lo <= value <= hi:
        return f"{value} is out of range [{lo}, {hi}]"
    return None


def config_files(root: str) -> list[str]:
    """Paths of the files in `config/` (json and their .bak), sorted."""
    d = os.path.join(root, CONFIG_DIR)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, n) for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))
