"""Proving every file of a store root can be read, before any command answers from it.

Apart from the store model (readers.store) because a CommitLog listing
proves the root too but reads no queue: it loads only the three readers
this needs, not the store's batch, ext, RocksDB and DLedger readers (18 ms
of a listing's start-up).
"""

from __future__ import annotations

import os

from rmqdump.common.problems import InputError
from rmqdump.readers.commitlog import commitlog_dir
from rmqdump.readers.consumequeue import CONSUMEQUEUE_DIR, queue_dirs
from rmqdump.readers.indexfile import list_index_files
from rmqdump.readers.mapped import offset_files, readable_size


def prove_readable(root: str) -> None:
    """Every CommitLog, ConsumeQueue and IndexFile of a store root can be opened; else the input error `unreadable`
    naming the first that cannot (the readers prove each file as they list it: rmqdump.readers.mapped.offset_files).

    Every command given a store root calls it (through Store.open, or directly where it reads the store without
    one), so none answers from the rest of the store while passing over a file it could not read.
    """
    root = str(root)
    try:
        dirs = [commitlog_dir(root)] + [qdir for _, _, qdir in queue_dirs(os.path.join(root, CONSUMEQUEUE_DIR))[0]]
        for d in dirs:
            if d is not None:
                offset_files(d)
        for p in list_index_files(root):
            readable_size(p)
    except OSError as e:  # a directory that cannot be listed (consumequeue/, a queue's, index/)
        raise InputError("unreadable", e.filename or root, e.strerror or str(e), 0) from None
