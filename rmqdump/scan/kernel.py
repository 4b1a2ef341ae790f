"""The compiled record walk (numba): imported through rmqdump.scan._walk.kernel() only (numba set up first).

`scan` walks one byte range of a mapped CommitLog file by totalSize and, per
record, checks what the columnar parser checked (prefix, sizes, every length
against the record's end), the body CRC and the __CRC32# property CRC, and
takes what the broker's dispatch takes: topic (an id into a per-call topic
table), the TAGS hash, the DELAY level, and the index keys (UNIQ_KEY, each
KEYS token) as hashes with their byte ranges. It stops at the first record it
cannot take; the caller diagnoses that record. Constants come from kernel.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from rmqdump.scan.bytecopy import AHEAD
from rmqdump.scan.bytecopy import memcpy as _memcpy
from rmqdump.scan.bytecopy import prefetch as _prefetch
from rmqdump.scan.bytecopy import prefetch_lines as _prefetch_lines
from rmqdump.scan.layout import (
    BORN_V6,
    COL,
    CRC_PREFIX,
    CRC_TABLES,
    DELAY_NONE,
    DELAY_PY,
    END,
    FRAME_FIELDS,
    FRAME_MAGIC,
    FULL,
    HEADER_OFFSETS,
    HEADER_SIZES,
    KCOL,
    MIN_RECORD_SIZE,
    NAMES,
    PROPS_LEN,
    SEP_KEY,
    SEP_NV,
    SEP_PROP,
    STORE_V6,
    STUCK,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    UNIT_DANGLING,
    UNIT_NOT_START,
    UNIT_OUTSIDE,
    UNIT_QUEUE,
    UNIT_QUEUE_OFFSET,
    UNIT_SIZE,
    UNIT_TAGS,
    UNIT_TOPIC,
    WIDTHS,
    F,
)
from rmqdump.scan.native import crc_library
from rmqdump.scan.unsigned import u as _u
from rmqdump.scan.words import find as _find
from rmqdump.scan.words import word as _word
from rmqdump.schemas import constants as C

_T = CRC_TABLES.astype(np.int64)
_OFF = HEADER_OFFSETS
_HSIZE = HEADER_SIZES
_MAGIC_V1, _MAGIC_V2 = C.MAGIC_V1, C.MAGIC_V2
_CRC_LEN, _CRC_DIGITS = C.CRC_PROPERTY_LENGTH, C.CRC_DIGITS
_N_TAGS, _N_KEYS, _N_UNIQ, _N_DELAY = (NAMES[n] for n in (C.PROPERTY_TAGS, C.PROPERTY_KEYS, C.PROPERTY_UNIQ_KEY, C.PROPERTY_DELAY))

# field index, width, signedness of every header integer
_F_TOTAL, (_W_TOTAL, _S_TOTAL) = F["total_size"], WIDTHS["total_size"]
_F_MAGIC, (_W_MAGIC, _S_MAGIC) = F["magic"], WIDTHS["magic"]
_F_BCRC, (_W_BCRC, _S_BCRC) = F["body_crc"], WIDTHS["body_crc"]
_F_QID, (_W_QID, _S_QID) = F["queue_id"], WIDTHS["queue_id"]
_F_FLAG, (_W_FLAG, _S_FLAG) = F["flag"], WIDTHS["flag"]
_F_QOFF, (_W_QOFF, _S_QOFF) = F["queue_offset"], WIDTHS["queue_offset"]
_F_PHYS, (_W_PHYS, _S_PHYS) = F["phys_offset"], WIDTHS["phys_offset"]
_F_SYS, (_W_SYS, _S_SYS) = F["sys_flag"], WIDTHS["sys_flag"]
_F_BORN_TS, (_W_BORN_TS, _S_BORN_TS) = F["born_timestamp"], WIDTHS["born_timestamp"]
_F_BORN_HOST = F["born_host"]
_F_STORE_TS, (_W_STORE_TS, _S_STORE_TS) = F["store_timestamp"], WIDTHS["store_timestamp"]
_F_STORE_HOST = F["store_host"]
_F_RECON, (_W_RECON, _S_RECON) = F["reconsume_times"], WIDTHS["reconsume_times"]
_F_PREP, (_W_PREP, _S_PREP) = F["prepared_transaction_offset"], WIDTHS["prepared_transaction_offset"]
_F_BLEN, (_W_BLEN, _S_BLEN) = F["body_length"], WIDTHS["body_length"]
(_W_TL1, _S_TL1), (_W_TL2, _S_TL2), (_W_PL, _S_PL) = TOPIC_LEN_V1, TOPIC_LEN_V2, PROPS_LEN

_C_POS, _C_END, _C_TOTAL, _C_MAGIC, _C_BCRC = COL["_pos"], COL["_end"], COL["total_size"], COL["magic"], COL["body_crc"]
_C_QID, _C_FLAG, _C_QOFF, _C_PHYS, _C_SYS = COL["queue_id"], COL["flag"], COL["queue_offset"], COL["phys_offset"], COL["sys_flag"]
_C_BORN_TS, _C_BORN_POS, _C_BORN_THEN = COL["born_timestamp"], COL["born_host_pos"], COL["born_host_then"]
_C_STORE_TS, _C_STORE_POS, _C_STORE_THEN = COL["store_timestamp"], COL["store_host_pos"], COL["store_host_then"]
_C_RECON, _C_PREP, _C_BLEN, _C_BPOS = COL["reconsume_times"], COL["prepared_transaction_offset"], COL["body_length"], COL["body_pos"]
_C_TLEN, _C_TPOS, _C_PLEN, _C_PPOS = COL["topic_length"], COL["topic_pos"], COL["properties_length"], COL["properties_pos"]
_C_CRC, _C_PCRC, _C_TID, _C_TAGS, _C_TSLOW = COL["crc"], COL["prop_crc"], COL["topic_id"], COL["tags_hash"], COL["tags_slow"]
_C_DELAY, _C_DPOS, _C_DLEN, _C_TAPOS, _C_TALEN = COL["delay"], COL["delay_pos"], COL["delay_len"], COL["tags_pos"], COL["tags_len"]
_K_REC, _K_POS, _K_LEN, _K_HASH, _K_SLOW, _K_UNIQ, _K_UNITS = KCOL["rec"], KCOL["pos"], KCOL["len"], KCOL["hash"], KCOL["slow"], KCOL["uniq"], KCOL["units"]
(_O_FMAG, _W_FMAG, _S_FMAG), (_O_FSIZE, _W_FSIZE, _S_FSIZE) = FRAME_FIELDS["magic"], FRAME_FIELDS["size"]
(_O_FPOS, _W_FPOS, _S_FPOS), (_O_FBODY, _W_FBODY, _S_FBODY) = FRAME_FIELDS["pos"], FRAME_FIELDS["body_size"]
_FNV_BASIS, _FNV_PRIME = np.int64(-3750763034362895579), np.int64(1099511628211)
# A helper that allocates nothing and returns no array counts no references to the arrays it takes: numba's
# counting costs two calls per array per call, a tenth of an export's CPU in properties_columns' per-item helpers.
_leaf = njit(cache=True, nogil=True, _nrt=False)


@_leaf
def _rd(data, p, w, signed):
    """A big-endian integer of w bytes at p (w and signed are constants: the loop unrolls)."""
    v = np.int64(0)
    for i in range(w):
        v = (v << 8) | np.int64(data[_u(p + i)])
    if signed and w < 8:
        bit = np.int64(1) << (8 * w - 1)
        if v & bit:
            v -= bit << 1
    return v


@_leaf
def crc32(data, p, n):
    """zlib's CRC-32 of data[p:p+n] (slicing by 8)."""
    t = _T
    c = np.int64(0xFFFFFFFF)
    i = p
    e = p + n
    while i + 8 <= e:
        lo = c ^ (np.int64(data[_u(i)]) | (np.int64(data[_u(i + 1)]) << 8) | (np.int64(data[_u(i + 2)]) << 16) | (np.int64(data[_u(i + 3)]) << 24))
        c = (
            t[7, lo & 0xFF]
            ^ t[6, (lo >> 8) & 0xFF]
            ^ t[5, (lo >> 16) & 0xFF]
            ^ t[4, (lo >> 24) & 0xFF]
            ^ t[3, data[_u(i + 4)]]
            ^ t[2, data[_u(i + 5)]]
            ^ t[1, data[_u(i + 6)]]
            ^ t[0, data[_u(i + 7)]]
        )
        i += 8
    while i < e:
        c = t[0, (c ^ np.int64(data[_u(i)])) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ np.int64(0xFFFFFFFF)


_CRC_KIND = crc_library()[0]

if _CRC_KIND == "deflate":
    _deflate_crc32 = types.ExternalFunction("libdeflate_crc32", types.uint32(types.uint32, types.intp, types.uintp))

    @_leaf
    def _crc(data, p, n):
        """CRC-32 of data[p:p+n] by libdeflate (resolved by name from the library native.configure() loaded)."""
        return np.int64(_deflate_crc32(np.uint32(0), data.ctypes.data + p, np.uintp(n)))

elif _CRC_KIND == "zlib":
    _zlib_crc32 = types.ExternalFunction("crc32", types.uint64(types.uint64, types.intp, types.uint32))

    @_leaf
    def _crc(data, p, n):
        """CRC-32 of data[p:p+n] by zlib's crc32 (resolved by name from the zlib native.configure() loaded)."""
        return np.int64(_zlib_crc32(np.uint64(0), data.ctypes.data + p, np.uint32(n)))

else:

    @_leaf
    def _crc(data, p, n):
        """CRC-32 of data[p:p+n] by the table code (no zlib library found)."""
        return crc32(data, p, n)


@_leaf
def _named(data, s, e, name):
    """Value start if the property item [s, e) is NAME\\x01..., else -1."""
    k = len(name)
    if s + k >= e or data[_u(s + k)] != SEP_NV:
        return -1
    for i in range(k):
        if data[_u(s + i)] != name[i]:
            return -1
    return s + k + 1


@_leaf
def _cont(data, i, b, lo, hi):
    """Whether data[i] is a UTF-8 continuation byte in [lo, hi] inside the range."""
    return i < b and lo <= data[_u(i)] <= hi


@_leaf
def _put_key(keys, k, rec, data, a, b, uniq):
    """Index key k: record rec's text data[a:b] (UNIQ_KEY when uniq), with its Java hash and UTF-16 length.

    A leaf, not inlined by numba: taken into `scan` at numba's level, its two arrays were counted on every key (9% of
    the walk with keys, by the kernel timed in-process); LLVM still inlines it, without the counting."""
    hv, un, sl = _hash(data, a, b)
    keys[_K_REC, k] = rec
    keys[_K_POS, k] = a
    keys[_K_LEN, k] = b - a
    keys[_K_UNITS, k] = un
    keys[_K_HASH, k] = hv
    keys[_K_SLOW, k] = sl
    keys[_K_UNIQ, k] = uniq


@_leaf
def _hash(data, a, b):
    """Java hashCode (unsigned 32-bit) and UTF-16 length of the UTF-8 bytes [a, b), and 1 if they are not valid UTF-8.

    Java hashes the string's UTF-16 code units: a character past U+FFFF counts
    as its two surrogates. Invalid UTF-8 is left to the caller, which decodes
    it with replacement characters as the rest of rmqdump does.
    """
    h = np.int64(0)
    units = 0
    i = a
    while i < b:
        x = np.int64(data[_u(i)])
        if x < 0x80:
            cp = x
            i += 1
        elif 0xC2 <= x <= 0xDF and _cont(data, i + 1, b, 0x80, 0xBF):
            cp = ((x & 0x1F) << 6) | (np.int64(data[_u(i + 1)]) & 0x3F)
            i += 2
        elif 0xE0 <= x <= 0xEF:
            lo = 0xA0 if x == 0xE0 else 0x80
            hi = 0x9F if x == 0xED else 0xBF
            if not (_cont(data, i + 1, b, lo, hi) and _cont(data, i + 2, b, 0x80, 0xBF)):
                return h, units, 1
            cp = ((x & 0x0F) << 12) | ((np.int64(data[_u(i + 1)]) & 0x3F) << 6) | (np.int64(data[_u(i + 2)]) & 0x3F)
            i += 3
        elif 0xF0 <= x <= 0xF4:
            lo = 0x90 if x == 0xF0 else 0x80
            hi = 0x8F if x == 0xF4 else 0xBF
            if not (_cont(data, i + 1, b, lo, hi) and _cont(data, i + 2, b, 0x80, 0xBF) and _cont(data, i + 3, b, 0x80, 0xBF)):
                return h, units, 1
            cp = ((x & 0x07) << 18) | ((np.int64(data[_u(i + 1)]) & 0x3F) << 12) | ((np.int64(data[_u(i + 2)]) & 0x3F) << 6) | (np.int64(data[_u(i + 3)]) & 0x3F)
            i += 4
        else:
            return h, units, 1
        if cp >= 0x10000:
            cp -= 0x10000
            h = (h * 31 + 0xD800 + (cp >> 10)) & 0xFFFFFFFF
            h = (h * 31 + 0xDC00 + (cp & 0x3FF)) & 0xFFFFFFFF
            units += 2
        else:
            h = (h * 31 + cp) & 0xFFFFFFFF
            units += 1
    return h, units, 0


@njit(cache=True, nogil=True)
def scan(data, size, start, end, check_crc, want_keys, out, keys, frame=0, base=0):
    """Records starting in [start, end) of a file of `size` bytes, from `start` (a record start).

    Fills out[column, record] and, when `want_keys`, keys[column, key] (a pass that builds or checks
    no index skips hashing them); returns (records, keys,
    stop position, stop code, topic table: first record of each topic id).
    `frame` > 0: each record is preceded by a DLedger entry header of that many
    bytes (file offset `base`): its magic, pos (= base + its position) and sizes
    must agree with the record, else the walk stops at the entry's start.
    """
    cap = out.shape[1]
    kcap = keys.shape[1]
    tsize = 64
    while tsize < 2 * cap:
        tsize <<= 1
    mask = tsize - 1
    table = np.full(tsize, -1, np.int64)
    rep = np.empty(cap, np.int64)  # topic id -> its first record
    rep_h = np.empty(cap, np.int64)
    ntop = 0
    n = 0
    nk = 0
    p = start
    code = np.int64(END)
    e0 = p  # start of the current record, or of its entry header
    fsize = fbody = 0
    while p < end:
        e0 = p
        if n >= cap:
            code = np.int64(FULL)
            break
        if frame:
            if p + frame + 8 > size:
                code = np.int64(STUCK)
                break
            if _rd(data, p + _O_FMAG, _W_FMAG, _S_FMAG) != FRAME_MAGIC or _rd(data, p + _O_FPOS, _W_FPOS, _S_FPOS) != base + p:
                code = np.int64(STUCK)
                break
            fsize = _rd(data, p + _O_FSIZE, _W_FSIZE, _S_FSIZE)
            fbody = _rd(data, p + _O_FBODY, _W_FBODY, _S_FBODY)
            p += frame
        if p + 8 > size:
            code = np.int64(STUCK)
            break
        total = _rd(data, p + _OFF[0, _F_TOTAL], _W_TOTAL, _S_TOTAL)
        magic = _rd(data, p + _OFF[0, _F_MAGIC], _W_MAGIC, _S_MAGIC)
        if (magic != _MAGIC_V1 and magic != _MAGIC_V2) or total < MIN_RECORD_SIZE or total > size - p:
            code = np.int64(STUCK)
            break
        if frame and (fsize != frame + total or fbody != total):
            code = np.int64(STUCK)
            break
        lim = p + total
        sys_flag = _rd(data, p + _OFF[0, _F_SYS], _W_SYS, _S_SYS)
        v = 0
        if sys_flag & BORN_V6:
            v |= 1
        if sys_flag & STORE_V6:
            v |= 2
        h = p + _HSIZE[v]
        if h > lim:
            code = np.int64(STUCK)
            break
        body_len = _rd(data, p + _OFF[v, _F_BLEN], _W_BLEN, _S_BLEN)
        if body_len < 0 or h + body_len > lim:
            code = np.int64(STUCK)
            break
        q = h + body_len
        if magic == _MAGIC_V2:
            if q + _W_TL2 > lim:
                code = np.int64(STUCK)
                break
            tlen = _rd(data, q, _W_TL2, _S_TL2)
            tpos = q + _W_TL2
        else:
            if q + _W_TL1 > lim:
                code = np.int64(STUCK)
                break
            tlen = _rd(data, q, _W_TL1, _S_TL1)
            tpos = q + _W_TL1
        if tlen < 0 or tpos + tlen + _W_PL > lim:
            code = np.int64(STUCK)
            break
        q = tpos + tlen
        plen = _rd(data, q, _W_PL, _S_PL)
        ppos = q + _W_PL
        if plen < 0 or ppos + plen != lim:
            code = np.int64(STUCK)
            break

        # properties: the dispatcher's values (the last value of a repeated name wins)
        ta = tb = ka = kb = ua = ub = da = db = -1
        s = ppos
        pe = lim
        while s < pe:
            e = _find(data, s, pe, SEP_PROP)
            x = _named(data, s, e, _N_TAGS)
            if x >= 0:
                ta, tb = x, e
            else:
                x = _named(data, s, e, _N_KEYS)
                if x >= 0:
                    ka, kb = x, e
                else:
                    x = _named(data, s, e, _N_UNIQ)
                    if x >= 0:
                        ua, ub = x, e
                    else:
                        x = _named(data, s, e, _N_DELAY)
                        if x >= 0:
                            da, db = x, e
            s = e + 1

        # index keys: UNIQ_KEY, then each non-empty KEYS token (the caller drops a rolled back transaction's)
        k0 = nk
        room = True
        if ua >= 0 and want_keys:
            if nk < kcap:
                _put_key(keys, nk, n, data, ua, ub, 1)
                nk += 1
            else:
                room = False
        if ka >= 0 and room and want_keys:
            a = ka
            while a <= kb and room:
                b = _find(data, a, kb, SEP_KEY)
                if b > a:
                    if nk < kcap:
                        _put_key(keys, nk, n, data, a, b, 0)
                        nk += 1
                    else:
                        room = False
                a = b + 1
        if not room:
            nk = k0
            code = np.int64(FULL)
            break

        # topic id: FNV-1a of the bytes, equal bytes checked against the topic's first record
        th = _FNV_BASIS
        for i in range(tpos, tpos + tlen):
            th = (th ^ np.int64(data[_u(i)])) * _FNV_PRIME
        slot = th & mask
        tid = -1
        while True:
            t = table[slot]
            if t < 0:
                break
            if rep_h[t] == th and out[_C_TLEN, rep[t]] == tlen:
                o = out[_C_TPOS, rep[t]]
                same = True
                for i in range(tlen):
                    if data[_u(o + i)] != data[_u(tpos + i)]:
                        same = False
                        break
                if same:
                    tid = t
                    break
            slot = (slot + 1) & mask
        if tid < 0:
            tid = ntop
            table[slot] = tid
            rep[tid] = n
            rep_h[tid] = th
            ntop += 1

        tags_h = 0
        tags_slow = 0
        if ta >= 0 and tb > ta:
            tags_h, _, tags_slow = _hash(data, ta, tb)
            if tags_h >= 0x80000000:
                tags_h -= 0x100000000
        delay = np.int64(DELAY_NONE)
        if da >= 0:
            delay = np.int64(DELAY_PY)
            if 0 < db - da <= 18:
                d = 0
                for i in range(da, db):
                    x = np.int64(data[_u(i)]) - 48
                    if x < 0 or x > 9:
                        d = -1
                        break
                    d = d * 10 + x
                if d >= 0:
                    delay = d

        crc = -1
        pcrc = -1
        if check_crc:
            body_crc = _rd(data, p + _OFF[v, _F_BCRC], _W_BCRC, _S_BCRC)
            # checkMessageAndReturnSize checks the body CRC only when bodyLen > 0: an empty body passes whatever bodyCRC says
            crc = 1 if body_len == 0 or (_crc(data, h, body_len) & 0x7FFFFFFF) == body_crc else 0
            if plen >= _CRC_LEN:
                t0 = lim - _CRC_LEN
                head = True
                for i in range(len(CRC_PREFIX)):
                    if data[_u(t0 + i)] != CRC_PREFIX[i]:
                        head = False
                        break
                if head:
                    want = 0
                    scale = 1
                    for i in range(_CRC_DIGITS):
                        x = np.int64(data[_u(t0 + len(CRC_PREFIX) + i)]) - 48
                        if x < 0 or x > 9:
                            want = -1
                            break
                        want += x * scale
                        scale *= 10
                    pcrc = 1 if want >= 0 and (_crc(data, p, t0 - p) & 0x7FFFFFFF) == want else 0

        out[_C_POS, n] = p
        out[_C_END, n] = lim
        out[_C_TOTAL, n] = total
        out[_C_MAGIC, n] = magic
        out[_C_BCRC, n] = _rd(data, p + _OFF[v, _F_BCRC], _W_BCRC, _S_BCRC)
        out[_C_QID, n] = _rd(data, p + _OFF[v, _F_QID], _W_QID, _S_QID)
        out[_C_FLAG, n] = _rd(data, p + _OFF[v, _F_FLAG], _W_FLAG, _S_FLAG)
        out[_C_QOFF, n] = _rd(data, p + _OFF[v, _F_QOFF], _W_QOFF, _S_QOFF)
        out[_C_PHYS, n] = _rd(data, p + _OFF[v, _F_PHYS], _W_PHYS, _S_PHYS)
        out[_C_SYS, n] = sys_flag
        out[_C_BORN_TS, n] = _rd(data, p + _OFF[v, _F_BORN_TS], _W_BORN_TS, _S_BORN_TS)
        out[_C_BORN_POS, n] = p + _OFF[v, _F_BORN_HOST]
        out[_C_BORN_THEN, n] = v & 1
        out[_C_STORE_TS, n] = _rd(data, p + _OFF[v, _F_STORE_TS], _W_STORE_TS, _S_STORE_TS)
        out[_C_STORE_POS, n] = p + _OFF[v, _F_STORE_HOST]
        out[_C_STORE_THEN, n] = v >> 1
        out[_C_RECON, n] = _rd(data, p + _OFF[v, _F_RECON], _W_RECON, _S_RECON)
        out[_C_PREP, n] = _rd(data, p + _OFF[v, _F_PREP], _W_PREP, _S_PREP)
        out[_C_BLEN, n] = body_len
        out[_C_BPOS, n] = h
        out[_C_TLEN, n] = tlen
        out[_C_TPOS, n] = tpos
        out[_C_PLEN, n] = plen
        out[_C_PPOS, n] = ppos
        out[_C_CRC, n] = crc
        out[_C_PCRC, n] = pcrc
        out[_C_TID, n] = tid
        out[_C_TAGS, n] = tags_h
        out[_C_TSLOW, n] = tags_slow
        out[_C_TAPOS, n] = ta
        out[_C_TALEN, n] = tb - ta
        out[_C_DELAY, n] = delay
        out[_C_DPOS, n] = da
        out[_C_DLEN, n] = db - da
        n += 1
        p = lim
    if code != END:
        p = e0  # the caller diagnoses (or resumes at) the whole entry
    return n, nk, p, code, rep[:ntop].copy()


@njit(cache=True, nogil=True)
def index_put(slot_table, slot, first, prev_out):
    """The chain step of IndexFile.putKey for keys in put order (their slots given), entries numbered from `first`.

    Each key links to the entry its slot held (0: none) and the slot then
    holds the key's entry. Returns how many keys found their slot empty
    (the header's hashSlotCount grows by that).
    """
    empty = 0
    for i in range(len(slot)):
        s = slot[i]
        p = slot_table[s]
        if p == 0:
            empty += 1
        prev_out[i] = p
        slot_table[s] = first + i
    return empty


@_leaf
def _seek(phys, x, r):
    """The first index at or after r whose phys is >= x (phys sorted; phys[:r] < x), galloping forward from r."""
    n = phys.shape[0]
    if r < n and phys[r] < x:
        lo = r
        step = 1
        while lo + step < n and phys[lo + step] < x:
            lo += step
            step *= 2
        hi = min(lo + step, n)
        while lo < hi:  # first index in (lo, hi] with phys >= x; phys[lo] < x
            mid = (lo + hi) // 2
            if phys[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        r = lo
    return r


@njit(cache=True, nogil=True)
def join_offsets(phys, offsets, rows):
    """rows[i] = the index of offsets[i] in the sorted `phys` (where it would go when absent); returns whether each is there.

    A queue's unit offsets mostly ascend: each search gallops forward from the
    previous answer (a merge join when they are dense, a few probes when they
    skip other queues' records) and starts over where an offset steps back.
    """
    n = phys.shape[0]
    hit = np.zeros(offsets.shape[0], np.bool_)
    r = 0
    prev = offsets[0] if offsets.shape[0] else 0
    for i in range(offsets.shape[0]):
        x = offsets[i]
        if x < prev:
            r = 0
        prev = x
        r = _seek(phys, x, r)
        rows[i] = r
        hit[i] = r < n and phys[r] == x
    return hit


@njit(cache=True, nogil=True)
def unit_pointers(u_off, u_size, u_tags, u_idx, vpos, phys, r_size, r_topic, r_queue, r_qoff, r_tags, starts, ends, data_end, tid, qid, check_tags, rows):
    """Where each unit at positions `vpos` points, in one pass: a bit per finding (0: the record it names is there
    and agrees), and in rows[k] the record row it joined (-1: none). Record columns sorted by phys; the CommitLog's
    files are [starts[i], ends[i]); a record agrees when its size, topic, queue, queue offset (and tagsCode when
    check_tags) are the unit's. Offsets are joined as join_offsets joins them."""
    n = phys.shape[0]
    flags = np.zeros(vpos.shape[0], np.uint8)
    r = 0
    prev = -1
    for k in range(vpos.shape[0]):
        j = vpos[k]
        x = u_off[j]
        rows[k] = -1
        if x >= data_end:
            flags[k] = UNIT_DANGLING
            continue
        f = np.searchsorted(starts, x, side="right") - 1
        if f < 0 or x >= ends[f]:
            flags[k] = UNIT_OUTSIDE
            continue
        if x < prev:  # valid offsets are >= 0: the first one starts at 0 anyway
            r = 0
        prev = x
        r = _seek(phys, x, r)
        if r >= n or phys[r] != x:
            flags[k] = UNIT_NOT_START
            continue
        rows[k] = r
        b = 0
        if u_size[j] != r_size[r]:
            b |= UNIT_SIZE
        if r_topic[r] != tid:
            b |= UNIT_TOPIC
        if r_queue[r] != qid:
            b |= UNIT_QUEUE
        if r_qoff[r] != u_idx[j]:
            b |= UNIT_QUEUE_OFFSET
        if check_tags and u_tags[j] != r_tags[r]:
            b |= UNIT_TAGS
        flags[k] = b
    return flags


@_leaf
def _is(data, s, k, name):
    """Whether the k bytes at s are `name`."""
    same = k == len(name)
    i = 0
    while same and i < k:
        same = data[_u(s + i)] == name[i]
        i += 1
    return same


@_leaf
def _same(buf, a, b, k):
    """Whether the k bytes at a and at b of buf are the same (read in place: a slice would be an array to count)."""
    for i in range(k):  # noqa: SIM110 (numba compiles no generator expressions)
        if buf[_u(a + i)] != buf[_u(b + i)]:
            return False
    return True


@njit(cache=True, nogil=True)
def _room(a, need):
    """`a`, or a copy twice as long when `need` entries do not fit."""
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[: len(a)] = a
    return b


@_leaf
def _put(src, a, k, buf, offs, j):
    """Append src[a:a + k] to buf as string j (offs[j] is its start); returns the end."""
    t = offs[j]
    for i in range(k):
        buf[_u(t + i)] = src[_u(a + i)]
    offs[j + 1] = t + k
    return t + k


@_leaf
def _split_items(data, pos, length, r, k, nk, rows, nbuf, noffs, vbuf, voffs, toffs, tbuf, tags, uoffs, ubuf, uniq, krows, koffs, kbuf):
    """properties_columns' walk from record r on, until a record might not fit the item or token offsets (a record
    of L bytes holds at most (L + 1) // 2 of either); returns (the next record, items, tokens, 1 if some record
    holds one name twice). A leaf: the loop counts no array references (the arrays' growth is the caller's)."""
    n = len(pos)
    twice = 0
    while r < n:
        most = (length[r] + 1) // 2 + 1
        if k + most + 1 > len(noffs) or nk + most + 1 > len(koffs):
            break
        if r + AHEAD < n:  # a later record's properties, from memory while this one is split
            _prefetch_lines(data, pos[r + AHEAD], pos[r + AHEAD] + length[r + AHEAD])
        first = k
        ti = ui = ki = -1
        s = pos[r]
        pe = s + length[r]
        while s < pe:
            e = _find(data, s, pe, SEP_PROP)
            m = _find(data, s, e, SEP_NV)
            if m < e:
                a = _put(data, s, m - s, nbuf, noffs, k) - (m - s)
                _put(data, m + 1, e - m - 1, vbuf, voffs, k)
                for j in range(first, k):  # a handful of items per record
                    if noffs[j + 1] - noffs[j] == m - s and _same(nbuf, noffs[j], a, m - s):
                        twice = 1
                if _is(data, s, m - s, _N_TAGS):
                    ti = k
                elif _is(data, s, m - s, _N_UNIQ):
                    ui = k
                elif _is(data, s, m - s, _N_KEYS):
                    ki = k
                k += 1
            s = e + 1
        rows[r + 1] = k
        if ti >= 0:
            tags[r] = 1
            _put(vbuf, voffs[ti], voffs[ti + 1] - voffs[ti], tbuf, toffs, r)
        else:
            toffs[r + 1] = toffs[r]
        if ui >= 0:
            uniq[r] = 1
            _put(vbuf, voffs[ui], voffs[ui + 1] - voffs[ui], ubuf, uoffs, r)
        else:
            uoffs[r + 1] = uoffs[r]
        if ki >= 0:
            a = voffs[ki]
            ke = voffs[ki + 1]
            while a <= ke:
                b = _find(vbuf, a, ke, SEP_KEY)
                if b > a:
                    _put(vbuf, a, b - a, kbuf, koffs, nk)
                    nk += 1
                a = b + 1
        krows[r + 1] = nk
        r += 1
    return r, k, nk, twice


@njit(cache=True, nogil=True)
def properties_columns(data, pos, length):
    """Each record's properties [pos, pos + length) as Arrow buffers, in one pass over the bytes.

    The items (`name\x01value`, split on \x02) are taken as the broker's parser
    takes them: items without a name/value separator are dropped, like empty
    ones. Returns (row offsets into the items, name offsets and bytes, value
    offsets and bytes, TAGS and UNIQ_KEY per record (offsets, bytes, present),
    the KEYS tokens (row offsets, offsets, bytes: split on one space, empty
    tokens dropped), 1 if some record holds one name twice: the last value wins
    there, which these buffers do not express; the caller then takes the
    records by the Python parser).
    """
    n = len(pos)
    total = 0
    for r in range(n):
        total += length[r]
    rows = np.zeros(n + 1, np.int32)
    noffs = np.zeros(4 * n + 1, np.int32)
    voffs = np.zeros(4 * n + 1, np.int32)
    nbuf = np.empty(total, np.uint8)
    vbuf = np.empty(total, np.uint8)
    toffs = np.zeros(n + 1, np.int32)
    tbuf = np.empty(total, np.uint8)
    uoffs = np.zeros(n + 1, np.int32)
    ubuf = np.empty(total, np.uint8)
    tags = np.zeros(n, np.uint8)
    uniq = np.zeros(n, np.uint8)
    krows = np.zeros(n + 1, np.int32)
    koffs = np.zeros(2 * n + 1, np.int32)
    kbuf = np.empty(total, np.uint8)
    r = k = nk = twice = 0
    while True:
        r, k, nk, t = _split_items(data, pos, length, r, k, nk, rows, nbuf, noffs, vbuf, voffs, toffs, tbuf, tags, uoffs, ubuf, uniq, krows, koffs, kbuf)
        twice |= t
        if r == n:
            break
        most = (length[r] + 1) // 2 + 2
        noffs = _room(noffs, k + most)
        voffs = _room(voffs, k + most)
        koffs = _room(koffs, nk + most)
    return (
        rows, noffs[: k + 1], nbuf[: noffs[k]], voffs[: k + 1], vbuf[: voffs[k]], toffs, tbuf[: toffs[n]], tags,
        uoffs, ubuf[: uoffs[n]], uniq, krows, koffs[: nk + 1], kbuf[: koffs[nk]], twice,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def pack_bytes(data, pos, length):
    """data[pos[i]:pos[i] + length[i]] end to end, with Arrow's int32 offsets (a negative length packs nothing)."""
    n = len(pos)
    offs = np.zeros(n + 1, np.int32)
    t = 0
    for i in range(n):
        if length[i] > 0:
            t += length[i]
        offs[i + 1] = t
    buf = np.empty(t, np.uint8)
    for i in range(n):
        if i + AHEAD < n and length[i + AHEAD] > 0:  # a later record's first lines (the copy's stream takes the rest)
            _prefetch_lines(data, pos[i + AHEAD], pos[i + AHEAD] + min(length[i + AHEAD], 128))
        a = offs[i]
        b = offs[i + 1]
        if b > a:
            if pos[i] < 0 or pos[i] + (b - a) > len(data):
                raise IndexError("pack_bytes: a range past the data")
            _memcpy(buf, np.int64(a), data, pos[i], np.int64(b - a))
    return offs, buf


@njit(cache=True, nogil=True)
def holds_zero(data, pos, length):
    """Whether data[pos[i]:pos[i] + length[i]] holds a zero byte, for each i: read in place, nothing copied.

    A running minimum rather than a search that stops at the first zero: it compiles to vector code (3x faster),
    and a zero is rare (properties are text)."""
    n = len(pos)
    out = np.zeros(n, np.bool_)
    for i in range(n):
        p = pos[i]
        m = np.uint8(255)
        for j in range(length[i]):
            v = data[_u(p + j)]
            m = v if v < m else m
        out[i] = m == 0
    return out


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio: Fibonacci hashing keeps a key's spread in its top bits


@njit(cache=True, nogil=True)
def distinct_codes(keys):
    """The distinct values of `keys` in the order first met, and each key's index among them (int32).

    One pass over an open-addressing table, a key equal to the one before it
    taking its code without a probe: np.unique's sort of the same keys (a
    batch's hosts, its sysFlags) was 0.17 CPU-s of export's 3.3 per 1M records.
    """
    n = len(keys)
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    slots = np.full(mask + 1, -1, np.int32)
    uniq = np.empty(n, np.uint64)
    codes = np.empty(n, np.int32)
    m = 0
    for i in range(n):
        k = keys[i]
        if i > 0 and k == keys[i - 1]:
            codes[i] = codes[i - 1]
            continue
        s = np.int64((k * _GOLDEN) >> shift)
        while True:
            c = slots[s]
            if c < 0:
                slots[s] = m
                uniq[m] = k
                codes[i] = m
                m += 1
                break
            if uniq[c] == k:
                codes[i] = c
                break
            s = (s + 1) & mask
    return uniq[:m].copy(), codes


@njit(cache=True, nogil=True)
def word_codes(data, pos):
    """distinct_codes of the eight bytes at each of `pos` (an IPv4 host as stored: address, then port), read as one
    little-endian word each; a position is clipped into `data`, whose eight bytes are zeros when it is shorter.

    The records were walked long before (export builds a batch's hosts after its scan), so each read waits on memory:
    asking for the line AHEAD rows early, in one compiled loop, replaces numpy's gather of overlapping 8-byte views
    (0.11 of export's 2.6 CPU-s at 1M records; 0.045 this way).
    """
    n = len(pos)
    keys = np.zeros(n, np.uint64)
    last = len(data) - 8
    if last >= 0:
        for i in range(n):
            if i + AHEAD < n:
                _prefetch(data, min(max(pos[i + AHEAD], 0), last))
            keys[i] = _word(data, min(max(pos[i], 0), last))
    return distinct_codes(keys)


@njit(cache=True, nogil=True)
def spell_rows(heads, head_offs, code, tails, pairs):
    """Row i: the bytes heads[head_offs[code[i]]:head_offs[code[i] + 1]] then tails[i], each byte written as its two
    characters pairs[byte] (a little-endian uint16): Arrow's int32 offsets and the text (offset msgIds: a store host,
    then the offset's bytes, in hex)."""
    n = len(code)
    width = tails.shape[1]
    offs = np.zeros(n + 1, np.int32)
    t = 0
    for i in range(n):
        t += 2 * (head_offs[code[i] + 1] - head_offs[code[i]] + width)
        if t >= 1 << 31:
            raise ValueError("spell_rows: 2 GiB of text asked at once")
        offs[i + 1] = t
    text = np.empty(t, np.uint8)
    for i in range(n):
        o = offs[i]
        for j in range(head_offs[code[i]], head_offs[code[i] + 1]):
            pair = pairs[heads[_u(j)]]
            text[_u(o)] = np.uint8(pair & 0xFF)
            text[_u(o + 1)] = np.uint8(pair >> 8)
            o += 2
        for j in range(width):
            pair = pairs[tails[i, j]]
            text[_u(o)] = np.uint8(pair & 0xFF)
            text[_u(o + 1)] = np.uint8(pair >> 8)
            o += 2
    return offs, text
