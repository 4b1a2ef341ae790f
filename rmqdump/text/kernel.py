"""The numba code that spells records as text (import it through rmqdump.text.batches.kernels(): numba is set up first)."""

from __future__ import annotations

import numpy as np
from numba import njit

from rmqdump.scan.bytecopy import AHEAD
from rmqdump.scan.bytecopy import memcpy as _memcpy
from rmqdump.scan.bytecopy import prefetch as _prefetch
from rmqdump.scan.bytecopy import prefetch_lines as _prefetch_lines
from rmqdump.scan.unsigned import u as _u
from rmqdump.scan.words import HIGHS as _HIGHS
from rmqdump.scan.words import find as _find
from rmqdump.scan.words import json_stops as _json_stops
from rmqdump.scan.words import lowest as _lowest
from rmqdump.scan.words import word as _word
from rmqdump.text.spelling import (
    BASE64,
    C_EMPTY_LIST,
    C_EMPTY_MAP,
    C_END,
    C_FALSE,
    C_KIND,
    C_LIST_CLOSE,
    C_LIST_OPEN,
    C_LIST_SEP,
    C_MAP_CLOSE,
    C_MAP_COLON,
    C_MAP_OPEN,
    C_MAP_SEP,
    C_TRUE,
    FALLBACK,
    FILTERED,
    HEX_UPPER,
    L_BAD,
    L_BCRC,
    L_BODYLEN,
    L_BORN_HOST,
    L_BORN_TS,
    L_CRC,
    L_DASH,
    L_FALSE,
    L_FLAG,
    L_KEYS,
    L_KIND,
    L_MAGIC,
    L_MSGID,
    L_NULL,
    L_OK,
    L_PCRC,
    L_PHYS,
    L_PREP,
    L_PROPS,
    L_QID,
    L_QOFF,
    L_RECON,
    L_STORE_HOST,
    L_STORE_TS,
    L_SYSF,
    L_TAGS,
    L_TOPIC,
    L_TOTAL,
    L_TRUE,
    L_UNIQ,
    MAX_MS,
    N_KEYS,
    N_TAGS,
    N_UNIQ,
    PORT_BYTES,
    SEP_KEY,
    SEP_NV,
    SEP_PROP,
    TABLE_CELLS,
    TAKEN,
    V4_ADDR,
)
from rmqdump.text.spelling import M as _M

(POS, TOTAL, MAGIC_V, BCRC, QID, FLAG, QOFF, SYSF, BORN_TS, BORN_POS, BORN_V6, STORE_TS, STORE_POS, STORE_V6, RECON, PREP, BODYLEN, TOPIC_POS, TOPIC_LEN,
 PROPS_POS, PROPS_LEN, CRC, PCRC, FLAG_IDX, BODY_POS) = (_M[k] for k in (
    "_pos", "total_size", "magic_version", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp", "born_host_pos",
    "born_host_then", "store_timestamp", "store_host_pos", "store_host_then", "reconsume_times", "prepared_transaction_offset", "body_length",
    "topic_pos", "topic_length", "properties_pos", "properties_length", "crc", "prop_crc", "flag_idx", "body_pos"))  # fmt: skip
INT64_MIN_TEXT = np.frombuffer(b"-9223372036854775808", dtype=np.uint8).copy()
MIN_MS = -62135596800000
TEN = np.uint64(10)  # 0001-01-01T00:00:00.000Z
HUNDRED = np.uint64(100)
POW10 = np.array([10**k for k in range(20)], dtype=np.uint64)
DIGIT_PAIRS = np.frombuffer("".join(f"{k:02d}" for k in range(100)).encode(), dtype=np.uint8).copy()
# No reference counting: these functions allocate nothing (the caller gives every buffer, property items' room
# included), and numba's counting of the arrays each helper takes was a third of a JSON listing's CPU.
_kernel = njit(cache=True, nogil=True, _nrt=False)
# Inlined: the small helpers, and those a record calls many times (its ~27 integers, two hosts, the hex id): with the
# byte indices unsigned (rmqdump.scan.unsigned), the calls themselves were 15% of the JSON kernel's time.
_inline = njit(cache=True, nogil=True, _nrt=False, inline="always")


@_inline
def _lit(out, o, lit):
    for k in range(lit.shape[0]):  # a loop: a slice assignment costs more than these few bytes
        out[_u(o + k)] = lit[k]
    return o + lit.shape[0]


@_inline
def _copy(out, o, data, s, n):
    if n > 16:
        _memcpy(out, o, data, s, n)
    else:
        for k in range(n):
            out[_u(o + k)] = data[_u(s + k)]
    return o + n


@_inline
def _int(out, o, v):
    if v < 0:
        if v == -9223372036854775807 - 1:
            return _lit(out, o, INT64_MIN_TEXT)
        out[_u(o)] = 45
        o += 1
        v = -v
    u = np.uint64(v)  # unsigned: division without the floor correction
    nd = 1
    while nd < 20 and u >= POW10[nd]:
        nd += 1
    p = o + nd
    while u >= HUNDRED:  # two digits a division
        q = u // HUNDRED
        r = 2 * np.int64(u - q * HUNDRED)
        p -= 2
        out[_u(p)] = DIGIT_PAIRS[r]
        out[_u(p + 1)] = DIGIT_PAIRS[r + 1]
        u = q
    if u >= TEN:
        out[_u(p - 2)] = DIGIT_PAIRS[2 * np.int64(u)]
        out[_u(p - 1)] = DIGIT_PAIRS[2 * np.int64(u) + 1]
    else:
        out[_u(p - 1)] = np.uint8(48 + u)
    return o + nd


@_inline
def _lit_int(out, o, lit, v):
    """A literal, then an integer: the shape of most JSON fields."""
    return _int(out, _lit(out, o, lit), v)


@_kernel
def _fixed(out, o, v, width):
    """v (>= 0) in exactly `width` digits, zero-padded."""
    for k in range(width - 1, -1, -1):
        out[_u(o + k)] = 48 + v % 10
        v //= 10
    return o + width


@_kernel
def _utf8_ok(d, s, n):
    """Strict UTF-8, as Python's decoder takes it (no overlongs, surrogates or values past U+10FFFF)."""
    i = s
    e = s + n
    while i < e:
        c = d[_u(i)]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return False
        elif c < 0xE0:
            if i + 1 >= e or (d[_u(i + 1)] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= e:
                return False
            c1 = d[_u(i + 1)]
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F) or (c1 & 0xC0) != 0x80 or (d[_u(i + 2)] & 0xC0) != 0x80:
                return False
            i += 3
        elif c < 0xF5:
            if i + 3 >= e:
                return False
            c1 = d[_u(i + 1)]
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F) or (c1 & 0xC0) != 0x80 or (d[_u(i + 2)] & 0xC0) != 0x80 or (d[_u(i + 3)] & 0xC0) != 0x80:
                return False
            i += 4
        else:
            return False
    return True


@_kernel
def _plain(d, s, n):
    """True if the bytes are text JSON writes as they are: UTF-8 without quotes, backslashes or control characters."""
    high = False
    for i in range(s, s + n):
        c = d[_u(i)]
        if c < 0x20 or c == 0x22 or c == 0x5C:
            return False
        if c >= 0x80:
            high = True
    return not high or _utf8_ok(d, s, n)


@_inline
def _same(a, sa, b, sb, n):
    for k in range(n):  # noqa: SIM110 (numba compiles no generator expressions)
        if a[_u(sa + k)] != b[_u(sb + k)]:
            return False
    return True


@_inline
def _is(d, s, n, lit):
    return n == lit.shape[0] and _same(d, s, lit, 0, n)


@_kernel
def _props(d, s, n, its, itk, ite):
    """Items of `name\\x01value\\x02...` as (name start, separator, end); -1 if Python must decide.

    Python must decide when an item has no separator or two, a name repeats,
    a byte is one JSON escapes, or the text is not UTF-8.
    """
    e = s + n
    high = False
    seen = np.uint64(0)  # the words skipped, OR-ed: their high bits say whether any was past ASCII
    i = s
    m = 0
    while i <= e:
        j = i
        k = -1
        while j < e:
            if j + 8 <= e:  # skip to the next byte that is a separator or one JSON escapes (rmqdump.scan.words)
                w = _word(d, j)
                seen |= w
                stops = _json_stops(w)
                if stops == 0:
                    j += 8
                    continue
                j += _lowest(stops)
            c = d[_u(j)]
            if c == SEP_PROP:
                break
            if c == SEP_NV:
                if k >= 0:
                    return -1
                k = j
            elif c < 0x20 or c == 0x22 or c == 0x5C:
                return -1
            elif c >= 0x80:
                high = True
            j += 1
        if j > i:
            if k < 0 or m >= its.shape[0]:
                return -1
            its[m] = i
            itk[m] = k
            ite[m] = j
            m += 1
        i = j + 1
    if (high or (seen & _HIGHS) != 0) and not _utf8_ok(d, s, n):
        return -1
    for a in range(m):
        la = itk[a] - its[a]
        for b in range(a):
            if itk[b] - its[b] == la and _same(d, its[a], d, its[b], la):
                return -1
    return m


@_kernel
def _find_prop(d, its, itk, m, name):
    """Index of the item named `name`, or -1."""
    for a in range(m):
        if _is(d, its[a], itk[a] - its[a], name):
            return a
    return -1


@_inline
def _items(d, row, its, itk, ite):
    """A row's property items (their count m) and which are KEYS, TAGS and UNIQ_KEY (t, g, u; -1 absent); m < 0: Python decides."""
    m = _props(d, row[PROPS_POS], row[PROPS_LEN], its, itk, ite)
    if m < 0:
        return m, -1, -1, -1
    return m, _find_prop(d, its, itk, m, N_KEYS), _find_prop(d, its, itk, m, N_TAGS), _find_prop(d, its, itk, m, N_UNIQ)


@_kernel
def _accepts(d, row, its, itk, ite, t, g, u, ftopic, ftag, fkey, fl):
    """The content filters (--topic, --tag, --key) on one record."""
    if fl[0] and not _is(d, row[TOPIC_POS], row[TOPIC_LEN], ftopic):
        return False
    if fl[1] and (g < 0 or not _is(d, itk[g] + 1, ite[g] - itk[g] - 1, ftag)):
        return False
    if fl[2]:
        if u >= 0 and _is(d, itk[u] + 1, ite[u] - itk[u] - 1, fkey):
            return True
        if t < 0:
            return False
        j = itk[t] + 1
        e = ite[t]
        while j < e:
            q = _token_end(d, j, e)
            if q > j and _is(d, j, q - j, fkey):
                return True
            j = q + 1
        return False
    return True


@_inline
def _v4_host(out, o, d, p):
    for q in range(V4_ADDR):
        if q:
            out[_u(o)] = 46
            o += 1
        o = _int(out, o, np.int64(d[_u(p + q)]))
    out[_u(o)] = 58
    o += 1
    port = np.int64(0)
    for q in range(PORT_BYTES):
        port = (port << 8) | np.int64(d[_u(p + V4_ADDR + q)])
    if port >= 2147483648:
        port -= 4294967296
    return _int(out, o, port)


@_inline
def _hex(out, o, v, nbytes):
    for k in range(nbytes * 2 - 1, -1, -1):
        out[_u(o + k)] = HEX_UPPER[v & 15]
        v >>= 4
    return o + nbytes * 2


@_inline
def _snippet(out, o, snip, offs, f):
    """Snippet f of a packed table (rmqdump.text.batches.flag_snippets)."""
    return _copy(out, o, snip, offs[f], offs[f + 1] - offs[f])


@_inline
def _value(out, o, d, itk, ite, a):
    """The value of property item a."""
    return _copy(out, o, d, itk[a] + 1, ite[a] - itk[a] - 1)


@_inline
def _quoted(out, o, d, s, n):
    """d[s:s+n] between double quotes."""
    out[_u(o)] = 34
    o = _copy(out, o + 1, d, s, n)
    out[_u(o)] = 34
    return o + 1


@_inline
def _token_end(d, j, e):
    """End of the KEYS token that starts at j (its separator, or e)."""
    return _find(d, j, e, SEP_KEY)


@_inline
def _tokens(out, o, d, j, e, sep, quote):
    """The non-empty KEYS tokens of d[j:e], `sep` between them, each in double quotes when `quote`."""
    first = True
    while j < e:
        q = _token_end(d, j, e)
        if q > j:
            if not first:
                out[_u(o)] = sep
                o += 1
            first = False
            o = _quoted(out, o, d, j, q - j) if quote else _copy(out, o, d, j, q - j)
        j = q + 1
    return o


@_inline
def _value_or_null(out, o, d, itk, ite, a):
    if a < 0:
        return _lit(out, o, L_NULL)
    return _quoted(out, o, d, itk[a] + 1, ite[a] - itk[a] - 1)


@_inline
def _bool(out, o, v):
    if v < 0:
        return _lit(out, o, L_NULL)
    return _lit(out, o, L_TRUE if v else L_FALSE)


@_kernel
def _base64(out, o, d, s, n):
    """Bytes d[s:s+n] in base64 (RFC 4648, padded), as base64.b64encode spells them."""
    k = 0
    while k + 3 <= n:
        v = (np.int64(d[_u(s + k)]) << 16) | (np.int64(d[_u(s + k + 1)]) << 8) | np.int64(d[_u(s + k + 2)])
        out[_u(o)] = BASE64[(v >> 18) & 63]
        out[_u(o + 1)] = BASE64[(v >> 12) & 63]
        out[_u(o + 2)] = BASE64[(v >> 6) & 63]
        out[_u(o + 3)] = BASE64[v & 63]
        o += 4
        k += 3
    left = n - k
    if left:
        v = np.int64(d[_u(s + k)]) << 16
        if left == 2:
            v |= np.int64(d[_u(s + k + 1)]) << 8
        out[_u(o)] = BASE64[(v >> 18) & 63]
        out[_u(o + 1)] = BASE64[(v >> 12) & 63]
        out[_u(o + 2)] = BASE64[(v >> 6) & 63] if left == 2 else 61
        out[_u(o + 3)] = 61
        o += 4
    return o


@_kernel
def _message_json(out, o, d, base, row, file_json, snip, snip_offs, its, itk, ite, m, t, g, u, tail, body_end):
    o = _lit(out, _lit(out, o, L_KIND), file_json)
    o = _lit_int(out, o, L_PHYS, base + row[POS])
    o = _lit_int(out, o, L_TOTAL, row[TOTAL])
    o = _lit_int(out, o, L_MAGIC, row[MAGIC_V])
    o = _lit_int(out, o, L_BCRC, row[BCRC])
    o = _bool(out, _lit(out, o, L_CRC), row[CRC])
    o = _bool(out, _lit(out, o, L_PCRC), row[PCRC])
    o = _lit_int(out, o, L_QID, row[QID])
    o = _lit_int(out, o, L_FLAG, row[FLAG])
    o = _lit_int(out, o, L_QOFF, row[QOFF])
    o = _lit_int(out, o, L_SYSF, row[SYSF])
    o = _snippet(out, o, snip, snip_offs, row[FLAG_IDX])
    o = _lit_int(out, o, L_BORN_TS, row[BORN_TS])
    o = _v4_host(out, _lit(out, o, L_BORN_HOST), d, row[BORN_POS])
    o = _lit_int(out, o, L_STORE_TS, row[STORE_TS])
    o = _v4_host(out, _lit(out, o, L_STORE_HOST), d, row[STORE_POS])
    o = _lit_int(out, o, L_RECON, row[RECON])
    o = _lit_int(out, o, L_PREP, row[PREP])
    o = _lit_int(out, o, L_BODYLEN, row[BODYLEN])
    o = _lit(out, o, L_TOPIC)
    o = _copy(out, o, d, row[TOPIC_POS], row[TOPIC_LEN])
    o = _lit(out, o, L_PROPS)
    for a in range(m):
        if a:
            out[_u(o)] = 44
            o += 1
        o = _quoted(out, o, d, its[a], itk[a] - its[a])
        out[_u(o)] = 58
        o = _quoted(out, o + 1, d, itk[a] + 1, ite[a] - itk[a] - 1)
    o = _lit(out, o, L_TAGS)
    o = _value_or_null(out, o, d, itk, ite, g)
    o = _lit(out, o, L_KEYS)
    if t >= 0:
        o = _tokens(out, o, d, itk[t] + 1, ite[t], 44, True)
    o = _lit(out, o, L_UNIQ)
    o = _value_or_null(out, o, d, itk, ite, u)
    o = _lit(out, o, L_MSGID)
    sp = row[STORE_POS]
    for q in range(V4_ADDR + PORT_BYTES):
        o = _hex(out, o, np.int64(d[_u(sp + q)]), 1)
    o = _hex(out, o, base + row[POS], 8)
    out[_u(o)] = 34
    o = _lit(out, o + 1, tail)
    if body_end.shape[0]:  # the body in base64 after the tail, then body_end
        o = _lit(out, _base64(out, o, d, row[BODY_POS], row[BODYLEN]), body_end)
    return o


@_kernel
def gather(src, pick, width, rows, mat):
    """mat[r, j] = src[pick[j], rows[r]] for each j with pick[j] >= 0, narrowed as the batch's typed column holds
    it (width 4 or 2: a signed int32 or int16; 1: a bool, 0 or 1): the kernels' rows (rmqdump.scan's Columns.raw)
    without one numpy pass per column. Returns the rows written."""
    for r in range(rows.shape[0]):
        i = rows[r]
        for j in range(pick.shape[0]):
            p = pick[j]
            if p < 0:
                continue
            v = src[p, i]
            w = width[j]
            if w == 4:
                v = np.int64(np.int32(v))
            elif w == 2:
                v = np.int64(np.int16(v))
            elif w == 1:
                v = np.int64(1) if v != 0 else np.int64(0)
            mat[r, j] = v
    return rows.shape[0]


@_inline
def _ahead(d, mat, r):
    """Prefetch the lines of row r's record the kernels read (hosts; topic and properties, which end the record)."""
    if r < mat.shape[0]:
        row = mat[r]
        _prefetch(d, row[BORN_POS])
        _prefetch(d, row[STORE_POS])
        _prefetch_lines(d, row[TOPIC_POS], row[PROPS_POS] + row[PROPS_LEN])


@_kernel
def _simple(d, row):
    """Hosts the kernel writes (IPv4) and a topic JSON takes as it is."""
    return row[BORN_V6] == 0 and row[STORE_V6] == 0 and _plain(d, row[TOPIC_POS], row[TOPIC_LEN])


@_kernel
def json_lines(d, base, mat, file_json, snip, snip_offs, ftopic, ftag, fkey, fl, tail, body_end, out, ends, status, items):
    """One JSON object per row of `mat` into `out`, each up to its msg_id and then `tail` (the closing brace and
    newline, or the caller's fields, or nothing: the caller finishes the line); with a `body_end`, the body in
    base64 and then `body_end`. ends[r] is where row r's text ends; status[r] TAKEN, FALLBACK or FILTERED;
    `items` is room for one record's property items (rmqdump.text.batches.item_room)."""
    its, itk, ite = items[0], items[1], items[2]
    o = 0
    for r in range(mat.shape[0]):
        _ahead(d, mat, r + AHEAD)
        row = mat[r]
        st = FALLBACK
        if _simple(d, row):
            m, t, g, u = _items(d, row, its, itk, ite)
            if m >= 0:
                if _accepts(d, row, its, itk, ite, t, g, u, ftopic, ftag, fkey, fl):
                    o = _message_json(out, o, d, base, row, file_json, snip, snip_offs, its, itk, ite, m, t, g, u, tail, body_end)
                    st = TAKEN
                else:
                    st = FILTERED
        status[r] = st
        ends[r] = o
    return o


@_kernel
def _iso(out, o, ms):
    """Store time as the table prints it: 2026-11-21T23:54:55.473Z."""
    days = ms // 86400000
    rem = ms - days * 86400000
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    o = _fixed(out, o, year, 4)
    out[_u(o)] = 45
    o = _fixed(out, o + 1, month, 2)
    out[_u(o)] = 45
    o = _fixed(out, o + 1, day, 2)
    out[_u(o)] = 84
    o = _fixed(out, o + 1, rem // 3600000, 2)
    out[_u(o)] = 58
    o = _fixed(out, o + 1, rem // 60000 % 60, 2)
    out[_u(o)] = 58
    o = _fixed(out, o + 1, rem // 1000 % 60, 2)
    out[_u(o)] = 46
    o = _fixed(out, o + 1, rem % 1000, 3)
    out[_u(o)] = 90
    return o + 1


@_kernel
def display_width(b, s, e):
    """Terminal columns of UTF-8 text: East Asian wide characters take two."""
    w = 0
    i = s
    while i < e:
        c = b[_u(i)]
        if c < 0x80:
            w += 1
            i += 1
            continue
        if c < 0xE0:
            cp = ((c & 0x1F) << 6) | (b[_u(i + 1)] & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((c & 0x0F) << 12) | ((b[_u(i + 1)] & 0x3F) << 6) | (b[_u(i + 2)] & 0x3F)
            i += 3
        else:
            cp = ((c & 0x07) << 18) | ((b[_u(i + 1)] & 0x3F) << 12) | ((b[_u(i + 2)] & 0x3F) << 6) | (b[_u(i + 3)] & 0x3F)
            i += 4
        wide = (
            (0x1100 <= cp <= 0x115F) or (0x2E80 <= cp <= 0xA4CF and cp != 0x303F) or (0xAC00 <= cp <= 0xD7A3) or (0xF900 <= cp <= 0xFAFF)
            or (0xFE30 <= cp <= 0xFE4F) or (0xFF00 <= cp <= 0xFF60) or (0xFFE0 <= cp <= 0xFFE6) or (0x1F300 <= cp <= 0x1F64F)
            or (0x1F900 <= cp <= 0x1F9FF) or (0x20000 <= cp <= 0x3FFFD)
        )  # fmt: skip
        w += 2 if wide else 1
    return w


@_kernel
def table_cells(d, base, mat, tx, tx_offs, ftopic, ftag, fkey, fl, out, bounds, widths, status, items):
    """The table's cells of each row into `out`: cell c of row r is out[bounds[r, c]:bounds[r, c + 1]],
    widths[r, c] its terminal width."""
    its, itk, ite = items[0], items[1], items[2]
    o = 0
    for r in range(mat.shape[0]):
        _ahead(d, mat, r + AHEAD)
        row = mat[r]
        bounds[r, 0] = o
        st = FALLBACK
        ms = row[STORE_TS]
        if _simple(d, row) and MIN_MS <= ms <= MAX_MS:
            m, t, g, u = _items(d, row, its, itk, ite)
            if m >= 0:
                if _accepts(d, row, its, itk, ite, t, g, u, ftopic, ftag, fkey, fl):
                    st = TAKEN
                    o = _int(out, o, base + row[POS])
                    bounds[r, 1] = o
                    o = _int(out, o, row[TOTAL])
                    bounds[r, 2] = o
                    o = _copy(out, o, d, row[TOPIC_POS], row[TOPIC_LEN])
                    bounds[r, 3] = o
                    o = _int(out, o, row[QID])
                    bounds[r, 4] = o
                    o = _int(out, o, row[QOFF])
                    bounds[r, 5] = o
                    o = _iso(out, o, ms)
                    bounds[r, 6] = o
                    if g >= 0:
                        o = _value(out, o, d, itk, ite, g)
                    bounds[r, 7] = o
                    if t >= 0:
                        o = _tokens(out, o, d, itk[t] + 1, ite[t], SEP_KEY, False)
                    bounds[r, 8] = o
                    if u >= 0:
                        o = _value(out, o, d, itk, ite, u)
                    bounds[r, 9] = o
                    o = _snippet(out, o, tx, tx_offs, row[FLAG_IDX])
                    bounds[r, 10] = o
                    if row[CRC] < 0:
                        o = _lit(out, o, L_DASH)
                    else:
                        o = _lit(out, o, L_OK if row[CRC] else L_BAD)
                        if row[PCRC] >= 0:
                            out[_u(o)] = 47
                            o = _lit(out, o + 1, L_OK if row[PCRC] else L_BAD)
                    bounds[r, 11] = o
                    for c in range(TABLE_CELLS):
                        widths[r, c] = display_width(out, bounds[r, c], bounds[r, c + 1])
                else:
                    st = FILTERED
        if st != TAKEN:
            o = bounds[r, 0]
            for c in range(1, TABLE_CELLS + 1):
                bounds[r, c] = o
        status[r] = st
    return o


@_kernel
def table_lines(cells, bounds, widths, colw, status, lo, hi, out):
    """Rows lo..hi-1 that are TAKEN as lines, columns padded to `colw` and two spaces apart, no trailing blanks."""
    o = 0
    for r in range(lo, hi):
        if status[r] == TAKEN:
            last = 0
            for c in range(TABLE_CELLS):
                if bounds[r, c + 1] > bounds[r, c]:
                    last = c
            for c in range(last + 1):
                o = _copy(out, o, cells, bounds[r, c], bounds[r, c + 1] - bounds[r, c])
                if c < last:
                    for _ in range(colw[c] - widths[r, c] + 2):
                        out[_u(o)] = 32
                        o += 1
            out[_u(o)] = 10
            o += 1
    return o


@_kernel
def _has(d, s, n, c):
    return _find(d, s, s + n, c) < s + n


@_kernel
def _csv_bool(out, o, v):
    if v < 0:
        return o
    return _lit(out, o, C_TRUE if v else C_FALSE)


@_kernel
def _message_csv(out, o, d, base, row, file_csv, snip, snip_offs, its, itk, ite, m, t, g, u):
    o = _lit(out, o, C_KIND)
    o = _lit(out, o, file_csv)
    for col in (POS, TOTAL, MAGIC_V, BCRC):
        out[_u(o)] = 44
        o = _int(out, o + 1, base + row[POS] if col == POS else row[col])
    out[_u(o)] = 44
    o = _csv_bool(out, o + 1, row[CRC])
    out[_u(o)] = 44
    o = _csv_bool(out, o + 1, row[PCRC])
    for col in (QID, FLAG, QOFF, SYSF):
        out[_u(o)] = 44
        o = _int(out, o + 1, row[col])
    o = _snippet(out, o, snip, snip_offs, row[FLAG_IDX])  # ,transaction
    out[_u(o)] = 44
    o = _int(out, o + 1, row[BORN_TS])
    out[_u(o)] = 44
    o = _v4_host(out, o + 1, d, row[BORN_POS])
    out[_u(o)] = 44
    o = _int(out, o + 1, row[STORE_TS])
    out[_u(o)] = 44
    o = _v4_host(out, o + 1, d, row[STORE_POS])
    for col in (RECON, PREP, BODYLEN):
        out[_u(o)] = 44
        o = _int(out, o + 1, row[col])
    out[_u(o)] = 44
    o = _copy(out, o + 1, d, row[TOPIC_POS], row[TOPIC_LEN])
    out[_u(o)] = 44
    o += 1
    if g >= 0:
        o = _value(out, o, d, itk, ite, g)
    out[_u(o)] = 44
    o += 1
    # keys: json.dumps of the list (", " between items), as one quoted CSV field unless empty
    first = True
    if t >= 0:
        j = itk[t] + 1
        e = ite[t]
        while j < e:
            q = _token_end(d, j, e)
            if q > j:
                o = _lit(out, o, C_LIST_OPEN if first else C_LIST_SEP)
                first = False
                o = _copy(out, o, d, j, q - j)
            j = q + 1
    o = _lit(out, o, C_EMPTY_LIST if first else C_LIST_CLOSE)
    out[_u(o)] = 44
    o += 1
    if u >= 0:
        o = _value(out, o, d, itk, ite, u)
    out[_u(o)] = 44
    o += 1
    sp = row[STORE_POS]
    for q in range(V4_ADDR + PORT_BYTES):
        o = _hex(out, o, np.int64(d[_u(sp + q)]), 1)
    o = _hex(out, o, base + row[POS], 8)
    out[_u(o)] = 44
    o += 1
    if m == 0:
        o = _lit(out, o, C_EMPTY_MAP)
    for a in range(m):
        o = _lit(out, o, C_MAP_OPEN if a == 0 else C_MAP_SEP)
        o = _copy(out, o, d, its[a], itk[a] - its[a])
        o = _value(out, _lit(out, o, C_MAP_COLON), d, itk, ite, a)
    if m:
        o = _lit(out, o, C_MAP_CLOSE)
    return _lit(out, o, C_END)


@_kernel
def csv_lines(d, base, mat, file_csv, snip, snip_offs, ftopic, ftag, fkey, fl, out, ends, status, items):
    """One CSV row (the columns of rmqdump.cli.records.CSV_COLUMNS) per row of `mat`, as `csv.writer` writes
    them (the DLedger entry columns empty); a text field that would need quoting (a comma) leaves the row to Python."""
    its, itk, ite = items[0], items[1], items[2]
    o = 0
    for r in range(mat.shape[0]):
        _ahead(d, mat, r + AHEAD)
        row = mat[r]
        st = FALLBACK
        if _simple(d, row) and not _has(d, row[TOPIC_POS], row[TOPIC_LEN], 44):
            m, t, g, u = _items(d, row, its, itk, ite)
            if m >= 0:
                plain = (g < 0 or not _has(d, itk[g] + 1, ite[g] - itk[g] - 1, 44)) and (u < 0 or not _has(d, itk[u] + 1, ite[u] - itk[u] - 1, 44))
                if not plain:
                    st = FALLBACK
                elif _accepts(d, row, its, itk, ite, t, g, u, ftopic, ftag, fkey, fl):
                    o = _message_csv(out, o, d, base, row, file_csv, snip, snip_offs, its, itk, ite, m, t, g, u)
                    st = TAKEN
                else:
                    st = FILTERED
        status[r] = st
        ends[r] = o
    return o
