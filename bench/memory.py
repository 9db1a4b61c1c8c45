"""Retrieval-memory figures for docs/benchmarks.md: embedding throughput, query latency at
100,000 vectors, rebuild time.

Run: `.venv/bin/python bench/memory.py [--vectors 100000] [--rebuild-blocks 2000]`.
Goals from the retrieval-memory issue: query latency at 100,000 vectors < 10 ms; the
embedding anchor measured on the 2-core build machine is ~200 short strings/s.

- Embedding: all-MiniLM-L6-v2 (the default model) on block-like strings, batches of 64.
- Query: 100,000 random normalised vectors mapped to 100,000 stored blocks, loaded the way
  a console loads them (file + mapping, IVF index trained on load); the index search
  alone, and `Memory.search` end to end (embedding the query text, the label lookup).
- Rebuild: `Memory.rebuild()` on a store of `--rebuild-blocks` rememberable blocks (store
  read, embedding, file, mapping), extrapolated linearly to 100,000: embedding is nearly
  all of it and costs the same per block.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agents.memory import Memory
from storage import Author, NewNode, NodeStatus, TraceStore

WORDS = " ".join(
    [
        "read the config file find the port server listens answer write test check passed",
        "failed action outcome evaluation operator feedback rejected because the path does",
        "not exist retry with a smaller input the function raised KeyError missing key list",
    ]
).split()


def block_text(i: int) -> str:
    words = [WORDS[(i * 7 + j * 13) % len(WORDS)] for j in range(20 + i % 30)]
    return f"# tick {i % 40}: " + " ".join(words)


def fill_store(store: TraceStore, count: int, per_session: int = 2000) -> list[int]:
    """`count` orientation/outcome blocks, in sessions of `per_session`."""
    ids: list[int] = []
    for start in range(0, count, per_session):
        session = store.create_session("bench", title=f"bench {start}")
        size = min(per_session, count - start)
        nodes = [
            NewNode(
                kind="orientation" if i % 2 else "outcome",
                text=block_text(start + i),
                tick=i // 2,
                parent_index=i - 1 if i else None,
                author=Author.MODEL if i % 2 else Author.RUNTIME,
                status=NodeStatus.CHOSEN,
            )
            for i in range(size)
        ]
        ids += [n.id for n in store.add_nodes(session.id, nodes)]
    return ids


def short_text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 13) % len(WORDS)] for j in range(6 + i % 6))


def bench_embedding(memory: Memory, count: int, make: Callable[[int], str] = block_text) -> float:
    texts = [make(i) for i in range(count)]
    memory.embed(texts[:64])  # load and warm up
    started = time.perf_counter()
    memory.embed(texts)
    return count / (time.perf_counter() - started)


def bench_query(folder: Path, vectors: int, queries: int) -> dict[str, float]:
    import numpy as np

    store = TraceStore(folder / "query.db")
    started = time.perf_counter()
    node_ids = fill_store(store, vectors)
    filled = time.perf_counter() - started
    memory = Memory(store, folder / "query.db.memory")
    dim = memory.dimension
    rng = np.random.default_rng(0)
    data = rng.standard_normal((vectors, dim), dtype=np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    key = "bench"
    vector_ids = store.add_memory_vectors(key, memory.model, node_ids)
    memory._write_new_file(key, vector_ids, data)
    started = time.perf_counter()
    assert memory.sync() == 0  # loads the file and the mapping, trains the index
    loaded = time.perf_counter() - started
    index = memory._index
    search_ms = []
    for _ in range(queries):
        query = data[rng.integers(vectors)] + 0.05 * rng.standard_normal(dim, dtype=np.float32)
        query /= np.linalg.norm(query)
        t = time.perf_counter()
        index.search(query.reshape(1, -1).astype(np.float32), 64)
        search_ms.append((time.perf_counter() - t) * 1000)
    end_to_end = []
    for i in range(min(queries, 50)):
        t = time.perf_counter()
        memory.search(block_text(i * 31), 10, exclude_session=1)
        end_to_end.append((time.perf_counter() - t) * 1000)
    store.close()
    return {
        "fill_s": filled,
        "load_s": loaded,
        "search_ms_median": statistics.median(search_ms),
        "search_ms_p95": sorted(search_ms)[int(0.95 * len(search_ms)) - 1],
        "end_to_end_ms_median": statistics.median(end_to_end),
        "end_to_end_ms_p95": sorted(end_to_end)[int(0.95 * len(end_to_end)) - 1],
    }


def bench_rebuild(folder: Path, blocks: int) -> float:
    store = TraceStore(folder / "rebuild.db")
    fill_store(store, blocks)
    memory = Memory(store, folder / "rebuild.db.memory")
    memory.embed(["warm up"])  # the model load is not part of a rebuild's cost per block
    started = time.perf_counter()
    added = memory.rebuild()
    took = time.perf_counter() - started
    assert added == blocks, (added, blocks)
    store.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embed", type=int, default=1000, help="strings to embed")
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rebuild-blocks", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scratch = TraceStore(folder / "scratch.db")
        memory = Memory(scratch, folder / "scratch.db.memory")
        rate = bench_embedding(memory, args.embed)
        short = bench_embedding(memory, args.embed, short_text)
        print(
            f"embedding: {rate:,.0f} strings/s ({args.embed} block-like strings, "
            f"~100-420 chars); {short:,.0f} strings/s (short strings, 6-11 words)"
        )
        scratch.close()

        q = bench_query(folder, args.vectors, args.queries)
        print(
            f"query at {args.vectors:,} vectors: index search {q['search_ms_median']:.2f} ms "
            f"median, p95 {q['search_ms_p95']:.2f} ms (k=64); Memory.search end to end "
            f"{q['end_to_end_ms_median']:.1f} ms median, p95 {q['end_to_end_ms_p95']:.1f} ms; "
            f"load (file, mapping, IVF training) {q['load_s']:.2f} s"
        )

        took = bench_rebuild(folder, args.rebuild_blocks)
        per_block = took / args.rebuild_blocks
        print(
            f"rebuild: {args.rebuild_blocks:,} blocks in {took:.1f} s "
            f"({args.rebuild_blocks / took:,.0f} blocks/s); 100,000 blocks extrapolated: "
            f"{per_block * 100_000 / 60:.1f} min"
        )


if __name__ == "__main__":
    main()
