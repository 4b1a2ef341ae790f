"""The messages held by only one of two stores, as a Parquet dataset (`rmqdump diff --out`).

Rows have the export's columns with bodies (rmqdump.export.arrowbatch), so
they can be re-sent like any exported message; the dataset is partitioned
`side=a|b/topic=.../` (hive style) and published through common/publish.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdump.common.publish import publishing
from rmqdump.export import arrowbatch
from rmqdump.export.dataset import ROWS_PER_GROUP_WITH_BODY, TopicParquetWriter
from rmqdump.readers.store import Store
from rmqdump.scan.walk import scan_commitlog


def write_side_messages(
    stores: dict[str, Store], phys: dict[str, list[int]], start: int, out: str, *, force: bool = False, check_crc: bool = True
) -> dict[str, int]:
    """Write each side's records at the physical offsets `phys[side]` (all at or past `start`); rows written per side."""
    written = {}
    with publishing(out, force=force, stores=[st.root for st in stores.values()]) as tmp:
        for side, st in stores.items():
            wanted = pa.array(np.unique(np.asarray(phys.get(side, []), dtype=np.int64)), pa.int64())
            written[side] = 0
            root = os.path.join(tmp, f"side={side}")
            os.makedirs(root)
            if not len(wanted):
                continue
            sch = arrowbatch.schema(with_body=True)
            with TopicParquetWriter(root, 0, sch, ROWS_PER_GROUP_WITH_BODY) as w:
                for batch in scan_commitlog(st.commitlog, from_offset=start, check_crc=check_crc):
                    if not len(batch):
                        continue
                    lo, hi = int(batch.phys[0]), int(batch.phys[-1])
                    if pc.all(pc.or_(pc.less(wanted, lo), pc.greater(wanted, hi))).as_py():
                        continue
                    for rb in arrowbatch.record_batches(batch, st.root, with_body=True):
                        keep = rb.filter(pc.is_in(rb.column("phys_offset"), value_set=wanted))
                        if keep.num_rows:
                            w.write(keep)
                            written[side] += keep.num_rows
    return written
