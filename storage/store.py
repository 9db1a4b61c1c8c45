"""`TraceStore`: the one API to the trace tree, decisions, labels, evaluations, jobs and
adapters.

Every write is one short transaction on the writer engine (`BEGIN IMMEDIATE` on SQLite);
every read a short connection on the reader engine. Nothing here holds a transaction
open between calls, so a long-lived console doesn't make the WAL grow, and iterators page
with keysets instead of holding a cursor.

The class is assembled from one mixin per aggregate, each in its own module:

- `storage.store_base`: the `Database` (the engines, `read()`/`write()`, `health`), which
  every aggregate reaches as `self.db`; `close`, the context manager, the table handles
  and the helpers several aggregates share;
- `storage.sessions`: sessions;
- `storage.batches`: batches and their tasks;
- `storage.nodes`: the nodes of a trace tree (add, read, walk, update);
- `storage.labels`: approval-gate decisions, labels and evaluation results;
- `storage.bulk_reads`: training data paged out of the store, and reads a session or a
  page of nodes at a time (`NodeOutline`);
- `storage.jobs`: jobs, job events and adapters;
- `storage.label_queue`: the queue of unlabelled branches and the labels in effect;
- `storage.memory_vectors`: which node each vector of an embedding index holds;
- `storage.improvements`: the runs of `agent-console improve`, their rounds in a JSON state.
"""

from __future__ import annotations

from storage.batches import BatchesMixin
from storage.bulk_reads import BulkReadsMixin, NodeOutline
from storage.improvements import ImprovementsMixin
from storage.jobs import JobsMixin
from storage.label_queue import LabelQueueMixin
from storage.labels import LabelsMixin
from storage.memory_vectors import MemoryVectorsMixin
from storage.nodes import NodesMixin
from storage.sessions import SessionsMixin
from storage.store_base import StoreBase

__all__ = ["NodeOutline", "TraceStore"]


class TraceStore(
    SessionsMixin,
    BatchesMixin,
    NodesMixin,
    LabelsMixin,
    BulkReadsMixin,
    JobsMixin,
    LabelQueueMixin,
    MemoryVectorsMixin,
    ImprovementsMixin,
    StoreBase,
):
    """Open (creating or upgrading) the store at `db`: a file path or a SQLAlchemy URL."""
