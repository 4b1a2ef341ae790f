"""The messages held by only one of two stores, as a Parquet dataset (`rmqdump diff --out`).

Rows have the export's columns with bodies (rmqdump.export.arrowbatch), so
they can be re-sent like any exported message; the dataset is partitioned
`side=a|b/topic=.../` (hive style) and published through common/publish.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdump.common.publish import publishing
from rmqdump.export import arrowbatch
from rmqdump.export.dataset import ROWS_PER_GROUP_WITH_BODY, TopicParquetWriter
from rmqdump.readers.store import Store
from rmqdump.scan import scanner


def _wanted_upto(chunks, pending: np.ndarray, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets at or below `hi` from `pending` then the ascending chunks (read only as far as needed), and the rest."""
    while not len(pending) or pending[-1] <= hi:
        nxt = next(chunks, None)
        if nxt is None:
            break
        pending = np.concatenate([pending, nxt])
    cut = int(np.searchsorted(pending, hi, side="right"))
    return pending[:cut], pending[cut:]


def write_side_messages(
    stores: dict[str, Store], phys: dict[str, Iterable[np.ndarray]], start: int, out: str, *, force: bool = False, check_crc: bool = True, sync: bool = True
) -> dict[str, int]:
    """Write each side's records at the physical offsets `phys[side]` (ascending chunks, all at or past `start`, read
    as the scan reaches them, so a long list is never held whole); rows written per side."""
    written = {}
    with publishing(out, force=force, stores=[st.root for st in stores.values()], sync=sync) as tmp:
        for side, st in stores.items():
            chunks = (c for c in phys.get(side, ()) if len(c))
            pending = next(chunks, np.zeros(0, np.int64))
            written[side] = 0
            root = os.path.join(tmp, f"side={side}")
            os.makedirs(root)
            if not len(pending):
                continue
            sch = arrowbatch.schema(with_body=True)
            with TopicParquetWriter(root, 0, sch, ROWS_PER_GROUP_WITH_BODY) as w:
                for batch in scanner.batches(st.commitlog, from_offset=start, check_crc=check_crc):
                    if not len(batch):
                        continue
                    take, pending = _wanted_upto(chunks, pending, int(batch.phys[-1]))
                    take = take[take >= int(batch.phys[0])]
                    if not len(take):
                        continue
                    wanted = pa.array(take, pa.int64())
                    for rb in arrowbatch.record_batches(batch, st.root, with_body=True):
                        keep = rb.filter(pc.is_in(rb.column("phys_offset"), value_set=wanted))
                        if keep.num_rows:
                            w.write(keep)
                            written[side] += keep.num_rows
                    if not len(pending):
                        pending = next(chunks, pending)
                        if not len(pending):
                            break  # every wanted record written
    return written
