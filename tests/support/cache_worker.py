"""A process of tests/core/test_cache_concurrency.py: `write DIR ID ROUNDS MAX_BYTES CODE` stores
every key of the shared key set (in an order of its own) ROUNDS times; `read DIR SECONDS
CODE` looks them up from fresh handles until time runs out and checks each answer. Each
writer's entry for a key differs (its id, a length of its own), so a torn or mixed entry
cannot pass for a whole one. Prints one JSON line of counts; exit 1 on a wrong answer."""
from __future__ import annotations

import json
import random
import sys
import time

from kir.cache import Cache

KEYS = [f"{i:02x}" + "5a" * 15 for i in range(24)]  # 24 keys over 24 subdirectories
WRITERS = 8


def code_of(base: bytes, key: str, writer: int) -> bytes:
    """Writer `writer`'s code for `key`: the real cubin, then a tail whose length and
    bytes depend on both."""
    tail = (key + f"-{writer}-").encode() * (1 + writer * 37 + int(key[:2], 16))
    return base + tail


def meta_of(key: str, writer: int) -> dict[str, str]:
    return {"producer": "tests/support/cache_worker.py", "writer": str(writer), "key.inputs": key}


def write(directory: str, writer: int, rounds: int, max_bytes: int, base: bytes) -> dict:
    cache = Cache(directory, max_bytes)
    order = list(KEYS)
    rng = random.Random(writer)
    for _ in range(rounds):
        rng.shuffle(order)
        for key in order:
            cache.store(key, code_of(base, key, writer), "cubin", "sm_90", meta_of(key, writer))
    return cache.stats()


def read(directory: str, seconds: float, base: bytes) -> tuple[dict, list[str]]:
    expected = {key: {code_of(base, key, w): w for w in range(WRITERS)} for key in KEYS}
    counts = {"hits": 0, "misses": 0, "errors": 0}
    wrong = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        cache = Cache(directory)  # a fresh handle: every lookup reads the disk
        for key in KEYS:
            entry = cache.lookup(key)
            if entry is None:
                counts["misses"] += 1
                continue
            counts["hits"] += 1
            writer = expected[key].get(entry.code)
            if writer is None or entry.meta != meta_of(key, writer) or (entry.kind, entry.arch) != ("cubin", "sm_90"):
                wrong.append(f"{key}: {len(entry.code)} code bytes, meta {entry.meta}: no writer's entry")
        counts["errors"] += cache.stats()["errors"]
        if cache.last_problem:
            wrong.append(cache.last_problem)
    return counts, wrong


def main() -> int:
    mode, directory = sys.argv[1], sys.argv[2]
    if mode == "write":
        base = open(sys.argv[6], "rb").read()
        print(json.dumps(write(directory, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), base)))
        return 0
    base = open(sys.argv[4], "rb").read()
    counts, wrong = read(directory, float(sys.argv[3]), base)
    print(json.dumps({**counts, "wrong": wrong[:10]}))
    return 1 if wrong or counts["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
