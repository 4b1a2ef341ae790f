"""Records grouped by queue, and the broker's rule for a queue offset that does not move its queue forward.

The ConsumeQueue builder writes no unit for a record whose queueOffset is not
above the last one its queue got (the broker's "build consume queue
repeatedly" skip), and salvage calls such an intact record a stale tail:
both go through the CommitLog's records queue by queue, in physical order,
carrying each queue's highest offset from one batch to the next.
"""

from __future__ import annotations

import numpy as np


def queue_key(topic_id: np.ndarray, queue_id: np.ndarray) -> np.ndarray:
    """One int64 per (topic index, queue id)."""
    return (topic_id.astype(np.int64) << 32) | (queue_id.astype(np.int64) & 0xFFFFFFFF)


def queue_members(n_topics: int, topic_id: np.ndarray, queue_id: np.ndarray) -> list[np.ndarray]:
    """The positions of each (topic, queue) among these messages, in order, queue by queue."""
    n = len(topic_id)
    if n == 0:
        return []
    qmin, qmax = int(queue_id.min()), int(queue_id.max())
    span = qmax - qmin + 1
    if qmin >= 0 and span <= 4096 and n_topics * span <= 1 << 20:
        # small ids: a queue key per message, the queues present by counting, no sort
        key = topic_id.astype(np.int64) * span + (queue_id - qmin)
        uniq = np.flatnonzero(np.bincount(key))
    else:
        key = queue_key(topic_id, queue_id)
        uniq = np.unique(key)
    if len(uniq) <= 64:  # a few queues: one pass each beats a sort
        return [np.flatnonzero(key == u) for u in uniq.tolist()]
    packed = np.sort((np.searchsorted(uniq, key).astype(np.int64) << 32) | np.arange(n, dtype=np.int64))
    order = packed & 0xFFFFFFFF
    bounds = np.searchsorted(packed >> 32, np.arange(len(uniq) + 1))
    return [order[bounds[j] : bounds[j + 1]] for j in range(len(uniq))]


def above_earlier(qo: np.ndarray, last: int) -> np.ndarray:
    """For one queue's offsets in CommitLog order: whether each is above every earlier one and above `last`, the
    highest the queue reached before them."""
    prior = np.empty(len(qo), dtype=np.int64)
    if len(qo):
        prior[0] = last
    if len(qo) > 1:
        np.maximum.accumulate(qo[:-1], out=prior[1:])
        np.maximum(prior[1:], last, out=prior[1:])
    return qo > prior
