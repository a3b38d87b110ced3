"""BM25 backends compared in one run: index build time and query latency of bm25s against rank-bm25.

Corpora: the public wiki passage samples (wiki-18 DPR passages, HippoRAG's 2Wiki corpus); queries: the TriviaQA
sample's questions, as the search agent would send them. Builds skip the disk cache (cache=False) so that the
fit itself is timed. Writes benchmarks/results/retrieval.json (atomically) and prints a table.

    .venv/bin/python benchmarks/retrieval.py [--data ../shared/data] [--repeats 3] [--queries 800]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from rlvr.io import atomic_write_json
from rlvr.retrieval import BM25Retriever, load_corpus

REPO = Path(__file__).resolve().parent.parent
CORPORA = {
    "wiki18_dpr_sample1000": "wiki_corpus/flashrag_wiki18_dpr_sample1000.jsonl",
    "hipporag_2wiki_corpus": "wiki_corpus/hipporag_2wikimultihopqa_corpus.json",
}
QUERIES = "triviaqa/triviaqa_test_sample800.jsonl"
BACKENDS = ("bm25s", "rank_bm25")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]


def measure(docs, queries: list[str], backend: str, repeats: int) -> dict:
    builds = []
    for _ in range(repeats):
        start = time.perf_counter()
        retriever = BM25Retriever(docs, backend=backend, cache=False)
        builds.append(time.perf_counter() - start)
    latencies = []
    for query in queries:
        start = time.perf_counter()
        retriever.search(query, k=1)
        latencies.append((time.perf_counter() - start) * 1000)
    return {
        "build_s_median": statistics.median(builds),
        "query_ms_mean": statistics.fmean(latencies),
        "query_ms_p50": percentile(latencies, 50),
        "query_ms_p95": percentile(latencies, 95),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("RLVR_SHARED_DATA", REPO.parent / "shared" / "data")))
    parser.add_argument("--repeats", type=int, default=3, help="index builds per backend (median reported)")
    parser.add_argument("--queries", type=int, default=800, help="how many TriviaQA questions to search")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "retrieval.json")
    args = parser.parse_args()

    questions_file = args.data / QUERIES
    if not questions_file.is_file():
        raise SystemExit(f"{questions_file} not found: pass --data <shared/data folder> or set RLVR_SHARED_DATA")
    queries = [json.loads(line)["question"] for line in questions_file.read_text().splitlines()][: args.queries]

    results = {}
    for name, rel in CORPORA.items():
        docs = load_corpus(args.data / rel)
        per_backend = {backend: measure(docs, queries, backend, args.repeats) for backend in BACKENDS}
        fast, slow = per_backend["bm25s"], per_backend["rank_bm25"]
        results[name] = {
            "passages": len(docs),
            "queries": len(queries),
            **per_backend,
            # How many times faster bm25s is than rank-bm25 (> 1: bm25s faster).
            "build_speedup": slow["build_s_median"] / fast["build_s_median"],
            "query_speedup": slow["query_ms_mean"] / fast["query_ms_mean"],
        }
        print(f"\n{name}: {len(docs)} passages, {len(queries)} queries, k=1")
        print(f"{'backend':<10} {'build s':>9} {'query ms mean':>14} {'p50':>8} {'p95':>8}")
        for backend, m in per_backend.items():
            print(
                f"{backend:<10} {m['build_s_median']:>9.3f} {m['query_ms_mean']:>14.3f} "
                f"{m['query_ms_p50']:>8.3f} {m['query_ms_p95']:>8.3f}"
            )
        print(f"bm25s speed-up: build x{results[name]['build_speedup']:.1f}, query x{results[name]['query_speedup']:.1f}")

    atomic_write_json(
        args.out,
        {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "repeats": args.repeats, "corpora": results},
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
