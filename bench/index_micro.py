"""Micro-benchmark of BM25Index: add / search / update / persistence timings and memory.

Synthetic documents are windows of the real corpus's words (so term statistics look like
agent text) with ~10% of the words replaced by Zipf-distributed made-up words and 0.5% by
one-off ones, so the vocabulary keeps growing with the collection as real vocabularies do
(Heaps' law: the corpus has 42k terms at 11.6k events; ~200k are expected at 100k).

    PYTHONPATH=. python bench/index_micro.py [10000 100000]

Times are CPU time of this process (time.process_time), so other load on a shared machine
does not inflate them.
"""

import gc
import random
import statistics
import sys
import time
import tracemalloc

import orjson

from compactor.search import analyze
from compactor.search.index import BM25Index
from evals.revisits import default_corpus

CORPUS = default_corpus()


def corpus_words() -> list[str]:
    words: list[str] = []
    with CORPUS.open("rb") as f:
        for line in f:
            words.extend(analyze._COMPOUND.findall(orjson.loads(line)["content"]))
    return words


def make_docs(words: list[str], n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        size = rng.randint(70, 200)  # raw words; ~1.5 index tokens each after splitting
        start = rng.randrange(len(words) - size)
        window = words[start : start + size]
        for i in range(len(window)):
            r = rng.random()
            if r < 0.005:  # one-off tokens: hashes, addresses, temp names
                window[i] = f"u{rng.getrandbits(40):x}"
            elif r < 0.1:
                window[i] = f"zz{int(rng.paretovariate(0.3)):x}"
        docs.append(" ".join(window))
    return docs


def _df(index: BM25Index, term: str) -> int:
    """The term's document frequency (0 for a term the index does not hold)."""
    tid = index._vocab.get(term)
    return 0 if tid is None else index._df[tid]


def _sampled_queries(index: BM25Index, docs: list[str], n: int, seed: int, compound: bool) -> list[str]:
    """2-4 terms of df 2..500 picked from random documents.

    compound=False: plain words only (no part splitting); True: one of them is an identifier
    or path, whose parts (``py``, ``django``, ``self`` ...) are usually very common.
    """
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        doc = docs[rng.randrange(len(docs))]
        words = [t for t in set(analyze.tokenize(doc)) if 2 <= _df(index, t) <= 500]
        plain = [t for t in words if analyze.query_terms(t) == [t]]
        parted = [t for t in words if len(analyze.query_terms(t)) > 2]
        if compound and parted and len(plain) >= 3:
            out.append(" ".join([rng.choice(parted), *rng.sample(plain, rng.randint(1, 3))]))
        elif not compound and len(plain) >= 4:
            out.append(" ".join(rng.sample(plain, rng.randint(2, 4))))
    return out


def common_queries(words: list[str], n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(words, 3)) for _ in range(n)]


def run(n: int, words: list[str]) -> None:
    docs = make_docs(words, n)
    ntok = sum(len(analyze.tokenize(d)) for d in docs[:2000]) / min(n, 2000)
    print(f"\n== {n:,} docs, ~{ntok:.0f} index tokens/doc")

    gc.collect()
    analyze._cache.clear()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = BM25Index()
    for i, d in enumerate(docs):
        index.add(str(i), d)
    with_cache = tracemalloc.get_traced_memory()[0] - base
    analyze._cache.clear()
    gc.collect()
    mem = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    postings = sum(len(p) for p in index._post)
    print(
        f"memory (tracemalloc): index {mem / 2**20:.1f} MiB "
        f"(+tokenizer cache: {with_cache / 2**20:.1f} MiB); vocab {len(index._vocab):,}, "
        f"postings {postings:,} ({mem / postings:.1f} B/posting)"
    )

    index = BM25Index()
    t = time.process_time()
    for i, d in enumerate(docs):
        index.add(str(i), d)
    dt = time.process_time() - t
    print(f"add: {dt:.2f}s total, {dt / n * 1e6:.0f} us/doc")

    for label, queries in (
        ("2-4 rare-ish words", _sampled_queries(index, docs, 200, 3, compound=False)),
        ("identifier/path + 1-3 words", _sampled_queries(index, docs, 200, 4, compound=True)),
        ("random corpus words x3", common_queries(words, 200)),
    ):
        times = []
        for q in queries:
            t = time.process_time()
            index.search(q, 10)
            times.append(time.process_time() - t)
        times.sort()
        print(
            f"search ({label}): median {statistics.median(times) * 1e6:.0f} us, "
            f"p90 {times[int(len(times) * 0.9)] * 1e6:.0f} us, max {times[-1] * 1e6:.0f} us"
        )

    rng = random.Random(11)
    t = time.process_time()
    for _ in range(1000):
        i = rng.randrange(n)
        index.update(str(i), docs[rng.randrange(n)])
    print(f"update: {(time.process_time() - t) / 1000 * 1e6:.0f} us/op")

    t = time.process_time()
    blob = orjson.dumps(index.to_state())
    t_dump = time.process_time() - t
    t = time.process_time()
    restored = BM25Index.from_state(orjson.loads(blob))
    t_load = time.process_time() - t
    t = time.process_time()
    rebuilt = BM25Index()
    for i, d in enumerate(docs):
        rebuilt.add(str(i), d)
    t_rebuild = time.process_time() - t
    assert len(restored) == len(index)
    print(
        f"persist: to_state+dumps {t_dump:.2f}s, {len(blob) / 2**20:.0f} MiB; "
        f"loads+from_state {t_load:.2f}s vs rebuild {t_rebuild:.2f}s"
    )


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 100_000]
    words = corpus_words()
    for n in sizes:
        run(n, words)


if __name__ == "__main__":
    main()
