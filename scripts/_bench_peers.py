"""What scripts/bench_tools.py and scripts/bench_enums.py share: cells in subprocesses, the peers, statistics.

* :func:`run_cell`: one cell = one fresh ``python SCRIPT --worker JOB OUT`` process, with a wall-clock
  timeout and a resident-memory ceiling (the worker writes its results after every phase, so a killed
  cell still reports what it finished and during which phase it was stopped);
* :class:`Peer`: llguidance or xgrammar on the whole schema, over the same byte-exact vocabulary as triec
  (the engines' tokenizer objects of :func:`triec.engines.make_engine`), in the compact convention of
  triec's own oracle: llguidance lark ``%llguidance {"no_forcing": true}`` + ``%json`` with
  ``whitespace_flexible: false`` and ``", "`` / ``": "``, parser limits unbounded (``max_items_in_row``
  and ``step_max_items`` too: an alternation of more than 2,000 tools otherwise compiles and then
  fails at its first token); xgrammar ``compile_json_schema(any_whitespace=False, separators=(", ", ": "))``
  with its compiler cache disabled. Set up as /work/proto/registry/peers.py measured them (RESULTS.md);
* :func:`decode_ids`: the model's own tokenization of a text (the tokenizer's ``tokenizer.json``), kept
  only when its bytes spell the text exactly: real decode paths, tokens that straddle boundaries included.

Nothing here asserts anything about speed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from triec.engines import ITEM_SEPARATOR as ITEM_SEP  # noqa: E402
from triec.engines import KEY_SEPARATOR as KEY_SEP  # noqa: E402

XG_OPTIONS = {"whitespace_flexible": False, "item_separator": ITEM_SEP, "key_separator": KEY_SEP}


# ---------------------------------------------------------------- statistics


def summary_us(xs: list[float]) -> dict[str, Any]:
    """Median, p99, mean, min, max and count of durations given in seconds, in microseconds."""
    if not xs:
        return {"n": 0}
    a = np.asarray(xs, dtype=np.float64) * 1e6
    return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


def median_s(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    from triec.bench.peers import machine_info, versions

    return {**machine_info(), "versions": versions(), "load_average_start": load_average(),
            "git": _git_head()}


def _git_head() -> dict[str, Any]:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
        return {"head": head, "modified": sorted(line[3:] for line in dirty if line.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


# ---------------------------------------------------------------- cells


class Out:
    """A worker's results, rewritten after every phase (a killed worker leaves what it finished)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {"status": "running", "phase": "start"}
        self.put()

    def put(self, **kw: Any) -> None:
        self.data.update(kw)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def run_cell(script: str, job: dict[str, Any], timeout: float, max_rss: float) -> dict[str, Any]:
    """Run one worker process on ``job``; its results with ``status`` ok / refused / timeout / memory / error.

    ``max_rss`` (bytes): the worker is killed when its resident memory passes it (the peers' compiles of large
    registries grow to many GB); ``timeout`` (seconds) likewise.
    """
    with tempfile.TemporaryDirectory(prefix="triec-bench-cell-") as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
        Path(job_path).write_text(json.dumps(job))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, script, "--worker", job_path, out_path], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed, peak = None, 0
        while True:
            try:
                proc.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                pass
            peak = max(peak, _rss_of(proc.pid))
            elapsed = time.perf_counter() - t0
            if elapsed > timeout:
                killed = "timeout"
            elif peak > max_rss:
                killed = "memory"
            if killed:
                proc.kill()
                proc.wait()
                break
        _out, err = proc.communicate()
        wall = time.perf_counter() - t0
        try:
            data = json.loads(Path(out_path).read_text())
        except (OSError, ValueError):
            data = {"phase": "start"}
    data["wall_s"] = wall
    data["peak_rss_watched"] = peak
    if killed == "timeout":
        data["status"] = "timeout"
        data["error"] = f"> {timeout:g} s (stopped during {data.get('phase', 'start')})"
    elif killed == "memory":
        data["status"] = "memory"
        data["error"] = f"killed at {peak / 2**30:.1f} GiB resident after {wall:.0f} s (during {data.get('phase')})"
    elif proc.returncode != 0 and data.get("status") not in ("refused", "error"):
        data["status"] = "error"
        data["error"] = f"worker exited with {proc.returncode}: {err.strip()[-400:]}"
    elif data.get("status") == "running":
        data["status"] = "error"
        data["error"] = f"worker ended during {data.get('phase')}: {err.strip()[-400:]}"
    return data


def first_line(e: BaseException | str, limit: int = 160) -> str:
    text = str(e).strip().split("\n")[0]
    return text[:limit]


# ---------------------------------------------------------------- decode paths


class Encoder:
    """The model's own tokenization of texts (no special tokens), kept when it spells the text byte for byte."""

    def __init__(self, vocab: Any, spec: str = "qwen2") -> None:
        from tokenizers import Tokenizer

        from triec.tokenizer.source import locate

        self.vocab = vocab
        self.tok = Tokenizer.from_str(json.dumps(locate(spec).tokenizer_json))

    def ids(self, text: str) -> list[int] | None:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        tb = self.vocab.token_bytes
        if all(0 <= i < self.vocab.num_tokens for i in ids) and b"".join(tb[i] for i in ids) == text.encode("utf-8"):
            return list(ids)
        return None


def row_ids(row: np.ndarray) -> np.ndarray:
    """The ids set in a mask row of any shape (``triec.runtime.bitmask.ids_of`` on the flattened row)."""
    from triec.runtime.bitmask import ids_of

    return ids_of(np.ascontiguousarray(row).reshape(-1))


# ---------------------------------------------------------------- table cells


def f_us(x: float | None) -> str:
    """Microseconds as a table cell (ms from 1,000 µs)."""
    if x is None:
        return ""
    if x >= 10_000:
        return f"{x / 1000:,.0f} ms"
    if x >= 1000:
        return f"{x / 1000:,.2f} ms"
    return f"{x:,.1f} us" if x < 100 else f"{x:,.0f} us"


def f_s(x: float | None) -> str:
    """Seconds as a table cell (ms below 1 s)."""
    if x is None:
        return ""
    return f"{x * 1000:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as a table cell, or empty when either is missing."""
    if a is None or not b:
        return ""
    r = a / b
    return f"{r:,.0f}x" if r >= 10 else f"{r:,.1f}x" if r >= 0.1 else f"{r:.2f}x"


# ---------------------------------------------------------------- peers


class Peer:
    """One engine on one whole schema (or grammar), with the calls a benchmark makes: triec's grammar driver
    (:class:`triec.engines.EngineDriver`, the interface the schema layer uses), built fresh so its set-up is timed."""

    def __init__(self, name: str, vocab: Any) -> None:
        from triec.engines import DRIVERS

        self.name = name
        self.vocab = vocab
        self.words = (vocab.vocab_size + 31) // 32
        t0 = time.perf_counter()
        self.driver = DRIVERS[name](vocab)
        self.setup_s = time.perf_counter() - t0

    # compile: llguidance builds much of its state lazily, in the first masks (the "cold" rows)
    def compile_schema(self, schema: dict[str, Any]) -> Any:
        return self.driver.compile(schema)  # compact: ", " and ": ", no free whitespace

    def compile_lark(self, lark: str) -> Any:
        return self.driver.compile_lark(lark)  # type: ignore[attr-defined]  # llguidance's driver

    def start(self, compiled: Any) -> Any:
        return self.driver.start(compiled)

    def fork(self, m: Any) -> Any:
        return self.driver.copy(m)

    def accept(self, m: Any, t: int) -> bool:
        return self.driver.accept(m, int(t))

    def new_row(self) -> np.ndarray:
        return np.zeros((1, self.words), dtype=np.int32)

    def fill(self, m: Any, row: np.ndarray) -> None:
        self.driver.fill(m, row.reshape(-1))

    def memory_bytes(self, compiled: Any) -> int | None:
        """xgrammar's ``CompiledGrammar.memory_size_bytes``; None for llguidance (no such call)."""
        if self.name == "xgrammar":
            return int(compiled.memory_size_bytes)
        return None
