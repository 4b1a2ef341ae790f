"""Generate a large, realistic CommitLog for benchmarks and scale tests.

    python bench/gen_store.py OUTDIR --size 1GiB [--file-size 1GiB] [--seed N]
                              [--topics A B C] [--queues 4] [--count N] [--manifest] [--force]

Writes OUTDIR/commitlog/ (files named by their 20-digit start offset, each
--file-size bytes, like a broker's preallocated mapped files) and, with
--manifest, OUTDIR/manifest.jsonl: one line per message with the field names
of the real fixtures' manifests (wroteOffset, logicsOffset, propertiesString,
body_sha256 ...), so the same comparisons work on both.

Why not a broker: a real broker needs a JVM and minutes per GiB; this writes
the same byte layout, and the layout comes from the construct schemas only:
the fixed head of each record is a numpy structured array whose dtype is
derived from `schemas.message_header()` (rmqdump.readers.fastpath.numpy_dtype), and
the variable tail (body, topic, properties and their length fields) follows
the order and widths of `schemas.MessageRecord` resolved for V1/IPv4 records.
tests/test_gen_store.py proves every record equal to MessageRecord.build.

Content follows the broker benchmark figure the issues cite (about 1M messages
per GiB): bodies of 200-1800 bytes (JSON-like text, UTF-8 prose, binary),
1-2 KEYS and a UNIQ_KEY on every message (IPv4 form, 32 hex characters, as
MessageClientIDSetter makes them), TAGS on most, born hosts from 64 producers, a few topics x --queues
queues with per-queue queueOffset sequences, strictly increasing store
timestamps, properties in the order a 4.9 broker writes them. Where the next
record does not fit (record + 8 > bytes left) the file ends with a BLANK
marker, as DefaultAppendMessageCallback does; the last file ends in zeros.

Streaming, bounded memory (one chunk of records at a time), deterministic for
a given --seed. Files are written into a temporary directory next to the
target and renamed into place at the end.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field

import numpy as np
from construct import Bytes, Container, IfThenElse

from rmqdump.readers.fastpath import numpy_dtype
from rmqdump.schemas import BlankMarker, MessageRecord, message_header
from rmqdump.schemas import constants as C

DEFAULT_TOPICS = ("TopicTest", "orders", "payments-events")
TAGS = ("TagA", "TagB", "TagC", "PAY-OK", "order_created", "订单创建")
TAG_SHARE = 0.85
BODY_MIN, BODY_MAX = 200, 1800
STORE_HOST = ("10.0.0.5", 10911)
CLUSTER = "DefaultCluster"
UNIQ_IP = bytes([192, 0, 2, 2])  # the fixtures' producer address (TEST-NET-1)
BASE_TIME_MS = int(_dt.datetime(2026, 11, 2, tzinfo=_dt.timezone.utc).timestamp() * 1000)
PRODUCERS = 64  # distinct born hosts (ip:port)
CHUNK = 8192
FLUSH_BYTES = 8 << 20

HEAD = message_header()  # V1 magic, IPv4 born and store hosts
HEAD_DTYPE = numpy_dtype(HEAD)
HEAD_SIZE = HEAD_DTYPE.itemsize
BLANK_BYTES = BlankMarker.sizeof()


def _tail_plan() -> list[tuple[str, struct.Struct | None]]:
    """MessageRecord's fields after the fixed head, resolved for a V1/IPv4 record.

    Each entry is (name, None) for a byte string, or (name, struct) for a
    fixed-width length field; the byte string's length field is proven to be
    `<name>_length` by evaluating the schema's own `this.` expression.
    """
    names = [sc.name for sc in MessageRecord.subcons]
    ctx = Container(magic=C.MAGIC_V1, sys_flag=0)
    plan: list[tuple[str, struct.Struct | None]] = []
    for sc in MessageRecord.subcons[names.index("body") :]:
        inner = sc.subcon
        if isinstance(inner, IfThenElse):
            inner = inner.thensubcon if inner.condfunc(ctx) else inner.elsesubcon
        if isinstance(inner, Bytes):
            probe = Container({f"{sc.name}_length": 12345})
            if inner.length(probe) != 12345:
                raise TypeError(f"{sc.name}: length is not this.{sc.name}_length")
            plan.append((sc.name, None))
        else:
            plan.append((sc.name, struct.Struct(inner.fmtstr)))
    return plan


TAIL_PLAN = _tail_plan()
if [n for n, _ in TAIL_PLAN] != ["body", "topic_length", "topic", "properties_length", "properties"]:
    raise TypeError(f"unexpected MessageRecord tail {TAIL_PLAN}")
_TOPIC_LEN = dict(TAIL_PLAN)["topic_length"]
_PROPS_LEN = dict(TAIL_PLAN)["properties_length"]
TAIL_FIXED = _TOPIC_LEN.size + _PROPS_LEN.size

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'1GiB', '256KiB', '1.5G' (binary), '100MB' (decimal), '4096' -> bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"bad size {text!r} (want e.g. 1GiB, 256KiB, 4096)")
    num, unit, suffix = m.groups()
    power = "KMGT".find(unit.upper()) + 1 if unit else 0
    base = 1000 if suffix.upper() == "B" and unit else 1024
    return int(float(num) * base**power)


def _ip_bytes(text: str) -> bytes:
    return bytes(int(x) for x in text.split("."))


def _pools(rng: np.random.Generator) -> dict[str, bytes]:
    """Body material: bodies are slices of these at random offsets (cheap, still varied)."""
    n = 1 << 20
    ascii_pool = rng.integers(0x20, 0x7F, size=n, dtype=np.uint8).tobytes()
    words = "Zahlung bestätigt für Bestellung · заказ оплачен · 订单已支付 · お支払い完了 · 🚚 pedido enviado · "
    text_pool = (words * (n // len(words.encode()) + 1)).encode()[:n]
    bin_pool = rng.bytes(n)
    return {"json": ascii_pool, "text": text_pool, "binary": bin_pool}


@dataclass
class Summary:
    messages: int = 0
    files: list[str] = field(default_factory=list)
    data_bytes: int = 0  # physical offset after the last record
    blanks: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"messages": self.messages, "files": len(self.files), "data_bytes": self.data_bytes, "blanks": self.blanks, "seconds": round(self.seconds, 2)}


class _Writer:
    """CommitLog files of one size, written sequentially into a temporary directory."""

    def __init__(self, tmpdir: str, file_size: int, summary: Summary):
        self.tmpdir, self.file_size, self.summary = tmpdir, file_size, summary
        self.base = 0
        self.pos = 0
        self.buf: list = []
        self.buffered = 0
        self.f = None
        self._open()

    def _open(self) -> None:
        name = f"{self.base:0{C.COMMITLOG_NAME_DIGITS}d}"
        self.f = open(os.path.join(self.tmpdir, name), "wb")  # noqa: SIM115 - closed in _close
        self.summary.files.append(name)

    def write(self, part) -> None:
        self.buf.append(part)
        n = len(part)
        self.pos += n
        self.buffered += n
        if self.buffered >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.f.write(b"".join(self.buf))
            self.buf, self.buffered = [], 0

    def _close(self) -> None:
        self.flush()
        self.f.truncate(self.file_size)  # the rest of a preallocated file reads as zeros
        self.f.close()

    def next_file(self) -> None:
        """End this file with the BLANK marker (totalSize = bytes left) and start the next."""
        left = self.file_size - self.pos
        self.write(BlankMarker.build(Container(total_size=left, magic=C.MAGIC_BLANK)))
        self.summary.blanks += 1
        self._close()
        self.base += self.file_size
        self.pos = 0
        self._open()

    def close(self) -> None:
        self._close()


def generate(
    outdir: str,
    size: int,
    *,
    file_size: int = C.DEFAULT_COMMITLOG_FILE_SIZE,
    seed: int = 1,
    topics: tuple[str, ...] = DEFAULT_TOPICS,
    queues: int = 4,
    count: int | None = None,
    manifest: bool = False,
    force: bool = False,
    chunk: int = CHUNK,
    log=None,
) -> Summary:
    """Write OUTDIR/commitlog (and OUTDIR/manifest.jsonl): records while they end within `size` bytes (and `count`)."""
    if file_size < HEAD_SIZE + 1024:
        raise ValueError(f"file size {file_size} is too small for a record")
    target = os.path.join(outdir, "commitlog")
    man_path = os.path.join(outdir, "manifest.jsonl")
    for p in (target, man_path):
        if os.path.exists(p) and not force:
            raise FileExistsError(f"{p} exists (use --force to replace it)")
    os.makedirs(outdir, exist_ok=True)
    tmpdir = os.path.join(outdir, f".commitlog.tmp-{os.getpid()}")
    shutil.rmtree(tmpdir, ignore_errors=True)
    os.makedirs(tmpdir)
    man_tmp = man_path + f".tmp-{os.getpid()}"
    t0 = time.perf_counter()
    summary = Summary()
    try:
        writer = _Writer(tmpdir, file_size, summary)
        with open(man_tmp, "w", encoding="utf-8") if manifest else open(os.devnull, "w") as man:
            _generate(writer, summary, size, file_size, seed, tuple(topics), queues, count, man if manifest else None, chunk, log)
            writer.close()
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(tmpdir, target)
        if manifest:
            os.replace(man_tmp, man_path)
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if os.path.exists(man_tmp):
            os.remove(man_tmp)
        raise
    summary.seconds = time.perf_counter() - t0
    return summary


def _generate(writer: _Writer, summary: Summary, size, file_size, seed, topics, queues, count, man, chunk, log) -> None:
    rng = np.random.default_rng(seed)
    pools = _pools(rng)
    kinds = ("json", "text", "binary")
    kind_p = (0.6, 0.25, 0.15)
    topic_b = [t.encode() for t in topics]
    topic_tail = [_TOPIC_LEN.pack(len(t)) + t for t in topic_b]
    store_ip = _ip_bytes(STORE_HOST[0])
    tag_props = [f"{C.PROPERTY_TAGS}{C.NAME_VALUE_SEPARATOR}{t}{C.PROPERTY_SEPARATOR}" for t in TAGS]
    # MessageClientIDSetter: IP, pid, class loader hash are fixed per producer; then ms since the month began, a counter.
    uniq_fix = (UNIQ_IP + int(rng.integers(1, 1 << 15)).to_bytes(2, "big") + int(rng.integers(0, 1 << 31)).to_bytes(4, "big")).hex().upper()
    month = _dt.datetime.fromtimestamp(BASE_TIME_MS / 1000, _dt.timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    month_ms = int(month.timestamp() * 1000)
    # Producer clients: each has one address and one connection (port) to the broker.
    producer_ip = (192 << 24 | 168 << 16) + rng.integers(0, 1 << 16, PRODUCERS)
    producer_port = rng.integers(32768, 61000, PRODUCERS)
    next_qoff = np.zeros((len(topics), queues), dtype=np.int64)
    seq = 0
    phys = 0  # physical offset of the next record
    done = False
    sep_nv, sep_p = C.NAME_VALUE_SEPARATOR, C.PROPERTY_SEPARATOR
    while not done:
        n = chunk if count is None else min(chunk, count - seq)
        if n <= 0:
            break
        tix = rng.integers(0, len(topics), n)
        qid = rng.integers(0, queues, n)
        blen = rng.integers(BODY_MIN, BODY_MAX + 1, n)
        kind = rng.choice(3, n, p=kind_p)
        boff = rng.integers(0, (1 << 20) - BODY_MAX, n)
        has_tag = rng.random(n) < TAG_SHARE
        tag = rng.integers(0, len(TAGS), n)
        nkeys = rng.integers(1, 3, n)
        order_no = rng.integers(100000, 1000000, n)
        user_no = rng.integers(1, 50000, n)
        born_lag = rng.integers(1, 50, n)
        producer = rng.integers(0, PRODUCERS, n)
        born_ip = producer_ip[producer]
        born_port = producer_port[producer]
        flag = np.where(rng.random(n) < 0.1, rng.integers(1, 1 << 16, n), 0)
        store_ts = BASE_TIME_MS + seq + np.arange(n, dtype=np.int64)  # strictly increasing
        born_ts = store_ts - born_lag

        bodies: list[bytes] = []
        props: list[bytes] = []
        pos = np.zeros(n, dtype=np.int64)
        total = np.zeros(n, dtype=np.int64)
        breaks: set[int] = set()
        qoff = np.zeros(n, dtype=np.int64)
        kept = n
        bts = born_ts.tolist()
        for i in range(n):
            k = int(kind[i])
            L = int(blen[i])
            o = int(boff[i])
            if k == 0:
                head = f'{{"orderId":"order-{order_no[i]}","user":"user_{user_no[i]}","seq":{seq + i},"note":"'.encode()
                body = head + pools["json"][o : o + max(0, L - len(head) - 2)] + b'"}'
                body = body[:L]
            else:
                body = pools[kinds[k]][o : o + L]
            keys = f"order-{order_no[i]}" if nkeys[i] == 1 else f"order-{order_no[i]} user_{user_no[i]}"
            uniq = f"{uniq_fix}{(bts[i] - month_ms) & 0xFFFFFFFF:08X}{(seq + i) & 0xFFFF:04X}"
            p = f"{C.PROPERTY_UNIQ_KEY}{sep_nv}{uniq}{sep_p}{C.PROPERTY_CLUSTER}{sep_nv}{CLUSTER}{sep_p}"
            if has_tag[i]:
                p += tag_props[tag[i]]
            p += f"{C.PROPERTY_KEYS}{sep_nv}{keys}"
            pb = p.encode()
            t = int(tix[i])
            sz = HEAD_SIZE + len(body) + TAIL_FIXED + len(topic_b[t]) + len(pb)
            if phys + sz > size or (count is not None and seq + i >= count):
                kept, done = i, True
                break
            if phys % file_size + sz + BLANK_BYTES > file_size:
                phys += file_size - phys % file_size
                if phys + sz > size:
                    kept, done = i, True
                    break
                breaks.add(i)
            q = int(qid[i])
            qoff[i] = next_qoff[t, q]
            next_qoff[t, q] += 1
            pos[i] = phys
            total[i] = sz
            phys += sz
            bodies.append(body)
            props.append(pb)
        n = kept
        if n == 0:
            break
        crc = np.fromiter((zlib.crc32(b) & 0x7FFFFFFF for b in bodies), dtype=np.int64, count=n)
        hdr = np.zeros(n, dtype=HEAD_DTYPE)
        hdr["total_size"] = total[:n]
        hdr["magic"] = C.MAGIC_V1
        hdr["body_crc"] = crc
        hdr["queue_id"] = qid[:n]
        hdr["flag"] = flag[:n]
        hdr["queue_offset"] = qoff[:n]
        hdr["phys_offset"] = pos[:n]
        hdr["sys_flag"] = 0
        hdr["born_timestamp"] = born_ts[:n]
        hdr["born_host"]["address"] = born_ip[:n].astype(">u4").view("V4")
        hdr["born_host"]["port"] = born_port[:n]
        hdr["store_timestamp"] = store_ts[:n]
        hdr["store_host"]["address"] = np.frombuffer(store_ip, dtype="V4")[0]
        hdr["store_host"]["port"] = STORE_HOST[1]
        hdr["reconsume_times"] = 0
        hdr["prepared_transaction_offset"] = 0
        hdr["body_length"] = [len(b) for b in bodies]
        raw = memoryview(hdr.tobytes())
        pack_plen = _PROPS_LEN.pack
        for i in range(n):
            if i in breaks:
                writer.next_file()
                if log:
                    log(f"{summary.files[-2]}: full, next file {summary.files[-1]}")
            writer.write(raw[i * HEAD_SIZE : (i + 1) * HEAD_SIZE])
            writer.write(bodies[i])
            writer.write(topic_tail[int(tix[i])])
            writer.write(pack_plen(len(props[i])))
            writer.write(props[i])
        if man is not None:
            _manifest_lines(man, seq, n, hdr, bodies, props, topics, tix, qid, store_ip)
        seq += n
        summary.messages = seq
        summary.data_bytes = phys


def _manifest_lines(man, seq, n, hdr, bodies, props, topics, tix, qid, store_ip) -> None:
    """Ground truth with the field names of fixtures/real/*/manifest.jsonl."""
    from rmqdump.readers.message import decode_properties, format_host, offset_msg_id, split_keys

    for i in range(n):
        h = hdr[i]
        pstr = props[i].decode("utf-8")
        pmap, _ = decode_properties(props[i])
        born = format_host(bytes(h["born_host"]["address"]), int(h["born_host"]["port"]))
        store_port = int(h["store_host"]["port"])
        phys = int(h["phys_offset"])
        rec = {
            "seq": seq + i,
            "origin": "gen_store",
            "topic": topics[int(tix[i])],
            "queueId": int(qid[i]),
            "sysFlag": int(h["sys_flag"]),
            "bornTimestamp": int(h["born_timestamp"]),
            "storeTimestamp": int(h["store_timestamp"]),
            "bornHost": born,
            "storeHost": format_host(store_ip, store_port),
            "reconsumeTimes": int(h["reconsume_times"]),
            "preparedTransactionOffset": int(h["prepared_transaction_offset"]),
            "flag": int(h["flag"]),
            "bodyCRC": int(h["body_crc"]),
            "tags": pmap.get(C.PROPERTY_TAGS),
            "keys": split_keys(pmap.get(C.PROPERTY_KEYS)),
            "uniqKey": pmap.get(C.PROPERTY_UNIQ_KEY),
            "properties": pmap,
            "propertiesString": pstr,
            "propertiesStringUtf8Len": len(props[i]),
            "body_sha256": hashlib.sha256(bodies[i]).hexdigest(),
            "body_len": len(bodies[i]),
            "status": "PUT_OK",
            "wroteOffset": phys,
            "wroteBytes": int(h["total_size"]),
            "msgId": offset_msg_id(store_ip, store_port, phys),
            "logicsOffset": int(h["queue_offset"]),
        }
        man.write(json.dumps(rec, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="store root to create: OUTDIR/commitlog/ (+ OUTDIR/manifest.jsonl)")
    ap.add_argument("--size", default="1GiB", help="CommitLog data to write: records end within this many bytes (default 1GiB)")
    ap.add_argument("--file-size", default="1GiB", help="size of every CommitLog file (default 1GiB, the broker default)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (same seed, same bytes)")
    ap.add_argument("--topics", nargs="+", default=list(DEFAULT_TOPICS), help="topic names")
    ap.add_argument("--queues", type=int, default=4, help="queues per topic")
    ap.add_argument("--count", type=int, default=None, help="stop after this many messages")
    ap.add_argument("--manifest", action="store_true", help="also write OUTDIR/manifest.jsonl (ground truth, one line per message)")
    ap.add_argument("--force", action="store_true", help="replace an existing OUTDIR/commitlog")
    a = ap.parse_args(argv)
    try:
        size, file_size = parse_size(a.size), parse_size(a.file_size)
        if a.queues < 1 or not a.topics or any(len(t.encode()) > 127 or not t for t in a.topics):
            raise ValueError("need >= 1 queue and topics of 1..127 UTF-8 bytes")

        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        s = generate(
            a.outdir,
            size,
            file_size=file_size,
            seed=a.seed,
            topics=tuple(a.topics),
            queues=a.queues,
            count=a.count,
            manifest=a.manifest,
            force=a.force,
            log=log,
        )
    except (ValueError, FileExistsError) as e:
        print(f"gen_store: {e}", file=sys.stderr)
        return 2
    print(json.dumps(s.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
