"""Semantic IDs at beam-search scale: one bitmask fill for every row of a step (issue 51, items 4-5).

A seeded catalog of 1,000,000 items x 4 codes (4 levels of 256 codes, each level's ids offset into a
151,936-wide vocabulary, as TIGER-style models give each level its own tokens) is compiled with
``triec.compile_ids``; then one step of B requests x W beams (64 x 64 = 4,096 rows) is masked at each level of a
beam search: every beam of a request at a distinct prefix of depth d (d = 0: the start; d = 4: items complete,
EOS only). Writers, on the same rows:

- ``triec numpy``: :class:`triec.runtime.mask_writer.MaskWriter` ``fill(states)``, one call for all rows (it clears
  only the words it set the step before);
- ``triec torch writer (CPU)``: the device table's writer, ``table.to_torch().mask_writer(B * W).fill(states)``
  (the words set the step before zeroed, the new ones written; on the CPU through numpy views of the same memory);
- ``triec torch writer, torch ops``: the same writer's torch-ops path (what a GPU runs), here on the CPU;
- ``triec torch fill (whole rows)``: the device table's ``fill(states, out)``, which writes every word of every row;
- ``dict trie``: GENRE's structure, a trie of nested Python dicts (token -> child dict), each beam holding its
  node (its best case: no walk from the root), each row's children set as bits into an int32 bitmask row, the
  words set the step before cleared (the same saving the triec writer has);
- ``marisa trie``: GENRE's ``MarisaTrie`` (``marisa_trie.Trie`` over the items spelled one character per id; a
  row's children are the next characters of ``keys(prefix)``), on a sample of the rows (it enumerates every item
  below a node), reported per row.

The torch-ops rows run with one intra-op thread (``torch.set_num_threads(1)``), and the writer's torch ops once more
with torch's default: on this shared 2-core machine the default pool's threads made a 4,096-row fill 28-30 ms
instead of 0.9-1.1 ms (microsecond ops split across busy cores), which is why the CPU writer goes through numpy.

``python -m benchmarks.beams_semantic [--quick]`` prints the medians and the ratios to the dict trie, measured
side by side in one run. :func:`rows` measures them here (one row per level and writer); :func:`run` and
:func:`tables` are the ``semantic`` section of the ``beams`` suite (:data:`benchmarks.suites.beams.SECTIONS`): the
rows measured in a fresh process, and their Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from benchmarks.measure import timed

VOCAB_SIZE = 151_936
EOS = 151_643
CODE_BASE = 100_000
"""Level l's code c is token ``CODE_BASE + 256 * l + c``."""
FULL = {"items": 1_000_000, "requests": 64, "beams": 64, "repeat": 15, "marisa_rows": 256}
QUICK = {"items": 20_000, "requests": 16, "beams": 16, "repeat": 3, "marisa_rows": 16}
TIMEOUT_S = 900.0
MAX_RSS = 8 * 2**30


def catalog(items: int, levels: int = 4, codes: int = 256, seed: int = 0) -> np.ndarray:
    """``items`` x ``levels`` token ids, seeded (duplicates are possible: the compiler drops them)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, codes, size=(items, levels)) + CODE_BASE + codes * np.arange(levels)


def beam_prefixes(items: np.ndarray, depth: int, requests: int, beams: int, seed: int = 1) -> list[tuple[int, ...]]:
    """Each request's ``beams`` distinct prefixes of length ``depth`` (fewer distinct ones exist: repeated), row by row."""
    rng = np.random.default_rng(seed + depth)
    rows: list[tuple[int, ...]] = []
    for _ in range(requests):
        picked: list[tuple[int, ...]] = []
        seen: set[tuple[int, ...]] = set()
        for i in rng.permutation(items.shape[0])[: 8 * beams].tolist():
            p = tuple(items[i, :depth].tolist())
            if p not in seen:
                seen.add(p)
                picked.append(p)
            if len(picked) == beams:
                break
        rows.extend(picked[j % len(picked)] for j in range(beams))
    return rows


def dict_trie(items: np.ndarray) -> dict[int, Any]:
    """GENRE's trie: nested dicts, token -> child; EOS is a child where an item ends (as GENRE stores it)."""
    root: dict[int, Any] = {}
    for seq in items.tolist():
        node = root
        for t in seq:
            node = node.setdefault(t, {})
        node[EOS] = {}
    return root


class DictWriter:
    """Bits of each row's children written into an int32 bitmask, the words set last step cleared first."""

    def __init__(self, rows: int, width: int) -> None:
        self.buf = np.zeros((rows, width), dtype=np.int32)
        self.flat = self.buf.reshape(-1)
        self.width = width
        self.last = np.zeros(0, dtype=np.int64)

    def fill(self, nodes: list[dict[int, Any]]) -> np.ndarray:
        self.flat[self.last] = 0
        flat: list[int] = []
        bits: list[int] = []
        width = self.width
        for r, node in enumerate(nodes):
            base = r * width
            for t in node:
                flat.append(base + (t >> 5))
                bits.append(1 << (t & 31))
        index = np.array(flat, dtype=np.int64)
        b = np.array(bits, dtype=np.int64).astype(np.uint32).view(np.int32)
        np.bitwise_or.at(self.flat, index, b)
        self.last = index
        return self.buf[: len(nodes)]


def marisa_children(trie: Any, prefix: str) -> list[int]:
    """GENRE's ``MarisaTrie.get``: the next character of every key below ``prefix`` (plus EOS at a complete key)."""
    n = len(prefix)
    out = {ord(k[n]) for k in trie.keys(prefix) if len(k) > n}
    if prefix in trie:
        out.add(EOS)
    return sorted(out)


def _marisa_rows(trie: Any, prefixes: list[str]) -> list[list[int]]:
    return [marisa_children(trie, q) for q in prefixes]


def _interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median seconds of each call, measured in rounds that call every one in turn (a load spike on a shared
    machine hits them all alike), after one untimed round."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeat + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r:
                samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(times) for name, times in samples.items()}


def rows(quick: bool = False, sizes: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """One row per (level, writer): ms per fill of all rows, us per row, ratio to the dict trie; masks checked
    equal (the triec rows against the dict trie's) before anything is timed. ``sizes``: in place of
    :data:`QUICK` / :data:`FULL` (the tests' tiny catalog)."""
    import torch

    import triec
    from triec.runtime.torch_writer import TorchMaskWriter

    p = sizes or (QUICK if quick else FULL)
    items = catalog(int(p["items"]))
    t0 = time.perf_counter()
    table = triec.compile_ids(items, vocab_size=VOCAB_SIZE, eos_token_ids=[EOS])
    compile_s = time.perf_counter() - t0
    n_rows = int(p["requests"]) * int(p["beams"])
    writer = table.mask_writer(n_rows)
    device = table.to_torch()
    device_writer = device.mask_writer(n_rows)  # on the CPU: numpy views of the device arrays
    ops_writer = TorchMaskWriter(device, n_rows, host=False)  # the torch ops a GPU runs
    out = torch.empty((n_rows, table.words_per_row), dtype=torch.int32)
    root = dict_trie(items)
    dict_writer = DictWriter(n_rows, table.words_per_row)
    marisa = _marisa(table)
    results: list[dict[str, Any]] = []
    for depth in range(5):
        prefixes = beam_prefixes(items, depth, int(p["requests"]), int(p["beams"]))
        states = np.array([table.walk(q) for q in prefixes], dtype=np.int64)
        nodes = [_node(root, q) for q in prefixes]
        torch_states = torch.from_numpy(states)
        got = writer.fill(states).copy()
        same = [
            dict_writer.fill(nodes),
            device.fill(torch_states, out).numpy(),
            device_writer.fill(torch_states).numpy(),
            ops_writer.fill(torch_states).numpy(),
        ]
        if not all(np.array_equal(got, other) for other in same):
            raise AssertionError(f"depth {depth}: the writers' masks differ")
        repeat = int(p["repeat"])
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the torch ops with one intra-op thread (module docstring); numpy has none
        try:
            timings = _interleaved(
                {
                    "triec numpy": partial(writer.fill, states),
                    "triec torch writer (CPU)": partial(device_writer.fill, torch_states),
                    "triec torch writer, torch ops": partial(ops_writer.fill, torch_states),
                    "triec torch fill (whole rows)": partial(device.fill, torch_states, out),
                    "dict trie": partial(dict_writer.fill, nodes),
                },
                repeat,
            )
        finally:
            torch.set_num_threads(threads)
        timings[f"... torch ops, {threads} threads"] = statistics.median(
            timed(partial(ops_writer.fill, torch_states), repeat)
        )
        if marisa is not None:
            few = int(p["marisa_rows"]) if depth > 1 else 4  # near the root it lists most of the catalog per row
            sample = ["".join(map(chr, q)) for q in prefixes[:few]]
            per_row = statistics.median(timed(partial(_marisa_rows, marisa, sample), 3)) / len(sample)
            timings["marisa trie (children only)"] = per_row * n_rows
        base = timings["dict trie"]
        words = int(np.count_nonzero(got))
        for name, seconds in timings.items():
            results.append(
                {
                    "depth": depth,
                    "writer": name,
                    "rows": n_rows,
                    "requests": int(p["requests"]),
                    "beams": int(p["beams"]),
                    "words_set": words,
                    "ms": round(1e3 * seconds, 4),
                    "us_per_row": round(1e6 * seconds / n_rows, 4),
                    "speedup_vs_dict": round(base / seconds, 2),
                    "items": int(items.shape[0]),
                    "distinct_items": table.num_values,
                    "compile_s": round(compile_s, 3),
                }
            )
    return results


# ---------------------------------------------------------------- the beams suite's section


def unavailable() -> str | None:
    """Why the section cannot run here: the device table's writer needs torch (marisa-trie is optional: without it
    the table says so in place of its row)."""
    import importlib.util

    return None if importlib.util.find_spec("torch") else "needs torch (the device table's mask writer)"


def cell(job: dict[str, Any], out: Any) -> None:
    """The suite's cell, in a fresh process (:func:`triec.bench.runner.run_cell`): every row of :func:`rows`."""
    import os

    load = list(os.getloadavg())
    out.put(phase="measuring", load_average=load)
    found = rows(quick=bool(job["quick"]))
    out.put(status="ok", phase="done", rows=found, marisa=_marisa_unavailable(), load_average=load)


def run(quick: bool) -> list[dict[str, Any]]:
    """The ``semantic`` section's cells: one per (level, writer) row, or one cell saying why there are none."""
    from triec.bench.runner import run_cell

    found = run_cell("benchmarks.beams_semantic:cell", {"quick": quick}, timeout=TIMEOUT_S, max_rss=MAX_RSS)
    if found.get("status") != "ok":
        return [{k: v for k, v in found.items() if k != "rows"}]
    extra = {"load_average": found.get("load_average"), "marisa": found.get("marisa"), "quick": quick}
    return [{"status": "ok", **extra, **r} for r in found["rows"]]


def _marisa_unavailable() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("marisa_trie") else "missing: pip install marisa-trie"


def tables(cells: list[dict[str, Any]]) -> dict[str, str]:
    """``semantic``: a caption (the catalog, the rows a step, the load), then per writer its µs a row at each
    level of the search with the dict trie's time over its own, and its slowest level (issue 51's targets: at
    most 1.5 µs a row, at least 10x the dict trie)."""
    from benchmarks import docs

    ok = [c for c in cells if c.get("status") == "ok" and "writer" in c]
    if not ok:
        notes = sorted({docs.status_note(c) for c in cells}) or ["no figures"]
        return {"semantic": f"Not measured in this run: {'; '.join(notes)}.\n"}
    first = ok[0]
    depths = sorted({int(c["depth"]) for c in ok})
    by = {(c["writer"], int(c["depth"])): c for c in ok}
    writers = list(dict.fromkeys(c["writer"] for c in ok))
    load = first.get("load_average") or []
    caption = (
        f"{first['items']:,} items x 4 codes ({first['distinct_items']:,} distinct), compiled in "
        f"{docs.seconds(first['compile_s'])}; {first['rows']:,} rows a step ({first['requests']} requests x "
        f"{first['beams']} beams); load average {', '.join(f'{x:.2f}' for x in load) or '-'} at the start. "
        "Each cell: µs a row, then the dict trie's time over the writer's."
    )
    if first.get("marisa"):
        caption += f" marisa trie: {first['marisa']}."
    words = ["words set a step", *(f"{by[(writers[0], d)]['words_set']:,}" for d in depths), "", ""]
    rows = [words]
    for w in writers:
        mine = [by.get((w, d)) for d in depths]
        cells_ = [f"{_us(c['us_per_row'])} ({docs.ratio(c['speedup_vs_dict'], 1.0)})" if c else "-" for c in mine]
        present = [c for c in mine if c]
        worst = max(present, key=lambda c: c["us_per_row"])
        least = min(present, key=lambda c: c["speedup_vs_dict"])
        slowest = f"{_us(worst['us_per_row'])} (depth {worst['depth']})"
        rows.append([w, *cells_, slowest, docs.ratio(least["speedup_vs_dict"], 1.0)])
    header = ["writer", *(_depth_label(d, depths[-1]) for d in depths), "slowest: µs a row", "least x dict trie"]
    return {"semantic": caption + "\n\n" + docs.markdown(header, rows)}


def _us(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:,.1f}"


def _depth_label(depth: int, last: int) -> str:
    if depth == 0:
        return "depth 0 (the start)"
    if depth == last:
        return f"depth {depth} (EOS only)"
    return f"depth {depth}"


def _node(root: dict[int, Any], prefix: tuple[int, ...]) -> dict[int, Any]:
    node = root
    for t in prefix:
        node = node[t]
    return node


def _marisa(table: Any) -> Any:
    try:
        import marisa_trie
    except ImportError:
        return None
    return marisa_trie.Trie(["".join(map(chr, v)) for v in table.value_ids])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 items, 16 x 16 rows")
    args = parser.parse_args()
    found = rows(quick=args.quick)
    first = found[0]
    print(
        f"{first['items']:,} items x 4 codes ({first['distinct_items']:,} distinct), compiled in {first['compile_s']} s; "
        f"{first['rows']:,} rows a step"
    )
    print(f"{'depth':>5} {'writer':<28} {'words set':>10} {'ms/step':>9} {'us/row':>8} {'x dict':>8}")
    for r in found:
        print(
            f"{r['depth']:>5} {r['writer']:<28} {r['words_set']:>10,} {r['ms']:>9.3f} {r['us_per_row']:>8.3f} "
            f"{r['speedup_vs_dict']:>8.2f}"
        )


if __name__ == "__main__":
    main()
