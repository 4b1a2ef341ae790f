"""Turn a plain store's CommitLog into a DLedger CommitLog, for benchmarks of DLedger stores at scale.

    python bench/gen_dledger.py SRC_STORE OUTDIR [--file-size 1GiB] [--force]

Reads SRC_STORE/commitlog/ (e.g. from bench/gen_store.py) and writes OUTDIR/dledger-n0/:
data/ (every message wrapped in a DLedger entry whose header is built from
schemas.dledger.EntryHeader, the message's physicalOffset field set to entry
pos + 48, a BLANK entry where the next one does not fit, the last file ending
in zeros), index/ (one schemas.dledger.IndexUnit per entry, in a file of
DLedger's default 167,772,160 bytes, sparse past the units), checkpoint and
currterm. Term 0, channel and CRC fields 0, as RocketMQ 5.3.3's DLedger writes
them (fixtures/real/rmq53-dledger). No ConsumeQueue or index: `rmqdump rebuild`
builds them. Writes into a temporary directory next to OUTDIR, renamed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from gen_store import parse_size  # bench/ is on sys.path when run as a script

from rmqdump.readers.commitlog import CommitLog
from rmqdump.readers.fastpath import field_offset, struct_format
from rmqdump.scan import scanner
from rmqdump.schemas import dledger as DL
from rmqdump.schemas import message_header

HEADER = struct_format(DL.EntryHeader)
UNIT = struct_format(DL.IndexUnit)
BLANK = struct_format(DL.BlankEntry)
PHYS_AT = field_offset(message_header(), "phys_offset")
INDEX_FILE = DL.INDEX_FILE_UNITS * DL.IndexUnit.sizeof()


def convert(src: str, out: str, file_size: int) -> dict:
    import struct

    phys = struct.Struct(">q")
    t0 = time.perf_counter()
    tmp = out + ".tmp-gen"
    shutil.rmtree(tmp, ignore_errors=True)
    d = os.path.join(tmp, "dledger-n0")
    os.makedirs(os.path.join(d, DL.DATA_DIR))
    os.makedirs(os.path.join(d, DL.INDEX_DIR))
    cl = CommitLog.open(os.path.join(src, "commitlog"))
    base, pos, index, files = 0, 0, 0, 1
    data = open(os.path.join(d, DL.DATA_DIR, f"{0:020d}"), "wb")  # noqa: SIM115 (one file after another)
    idx = open(os.path.join(d, DL.INDEX_DIR, f"{0:020d}"), "wb")  # noqa: SIM115 (one file after another)
    units = bytearray()
    for b in scanner.batches(cl, check_crc=False):
        view = b.mf.view
        chunk = bytearray()
        for p, n in zip(b.cols["_pos"].tolist(), b.cols["total_size"].tolist(), strict=True):
            size = HEADER.size + n
            if pos + size + 8 > file_size:  # MmapFileList.preAppend: a BLANK entry, then the next file
                chunk += BLANK.pack(DL.BLANK_MAGIC, file_size - pos) + bytes(file_size - pos - BLANK.size)
                data.write(chunk)
                data.close()
                chunk = bytearray()
                base += file_size
                pos = 0
                files += 1
                data = open(os.path.join(d, DL.DATA_DIR, f"{base:020d}"), "wb")  # noqa: SIM115 (one file after another)
            entry_pos = base + pos
            chunk += HEADER.pack(DL.ENTRY_MAGIC, size, index, 0, entry_pos, 0, 0, 0, n)
            rec = bytearray(view[p : p + n])
            phys.pack_into(rec, PHYS_AT, entry_pos + HEADER.size)
            chunk += rec
            units += UNIT.pack(DL.ENTRY_MAGIC, entry_pos, size, index, 0)
            index += 1
            pos += size
        data.write(chunk)
        idx.write(units)
        units = bytearray()
    data.truncate(file_size)
    data.close()
    idx.truncate(INDEX_FILE)  # sparse past the units, like DLedger's preallocated index file
    idx.close()
    with open(os.path.join(d, DL.CHECKPOINT_FILE), "w") as f:
        f.write(f"committedIndex={index - 1}\nendIndex={index - 1}\n")
    with open(os.path.join(d, DL.TERM_FILE), "w") as f:
        f.write("voteLeader=n0\ncurrTerm=0\n")
    os.rename(tmp, out)
    return {"entries": index, "data_files": files, "data_end": base + pos, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="a store root with commitlog/")
    ap.add_argument("outdir", help="store root to create (holds dledger-n0/)")
    ap.add_argument("--file-size", default="1GiB", help="size of every data file (default 1GiB)")
    ap.add_argument("--force", action="store_true", help="replace an existing OUTDIR")
    a = ap.parse_args()
    if os.path.exists(a.outdir):
        if not a.force:
            sys.exit(f"{a.outdir} exists (--force replaces it)")
        shutil.rmtree(a.outdir)
    print(json.dumps(convert(a.src, a.outdir, parse_size(a.file_size))))


if __name__ == "__main__":
    main()
