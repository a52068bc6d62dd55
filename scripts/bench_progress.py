"""What the compile's progress hook costs: the walk before the hook, with it unused, and with a live bar.

    python scripts/bench_progress.py [--k 1000,10000,100000] [--set tools|products] [--repeat 15] [--before REV]

Four variants run interleaved, round after round in rotated order, on the same trie (Qwen2 padded to
151,936, synthetic tool names or product paths, automaton in memory), and medians are printed:

* ``before``: triec/walk.py as of REV (default: the commit before the hook), loaded from git;
* ``none``: the walk now, ``progress=None`` (``triec.compile`` and ``--json``/``--quiet``);
* ``callback``: the walk now with the CLI's phase callback while no bar is shown (its first second);
* ``bar``: the walk now with a live rich bar drawn to a terminal console writing to /dev/null.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import triec  # noqa: E402
import triec.synthetic.sets  # noqa: E402
from triec.compiler.walk import walk  # noqa: E402
from triec.keys import prepare_values  # noqa: E402
from triec.trie import build_trie  # noqa: E402


def walk_at(rev: str):  # noqa: ANN201 - the old module's walk function
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:triec/walk.py"], capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "walk_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("walk_before", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.walk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="1000,10000,100000")
    ap.add_argument("--set", default="tools", choices=("tools", "products"))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--before", default=None, help="git revision of the walk without the hook (default: the last commit before it)")
    args = ap.parse_args()
    rev = args.before or subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%H", "-S", "progress(", "--reverse", "--", "triec/walk.py"],
        capture_output=True, text=True, check=True,
    ).stdout.strip() + "~1"
    before = walk_at(rev)

    from rich.console import Console

    from triec.cli import _common, _progress

    vocab = triec.Vocabulary.load("qwen2", vocab_size=151_936)
    automaton, width = vocab.automaton, vocab.vocab_size
    print(f"walk before = {rev}; set {args.set}; repeat {args.repeat}; medians in ms; the machine may be shared (noisy)")
    print(f"{'K':>9} {'before':>9} {'none':>9} {'callback':>9} {'bar':>9}   none/before  callback/before  bar/before")
    for k in (int(x) for x in args.k.split(",")):
        make = triec.synthetic.sets.tool_names if args.set == "tools" else triec.synthetic.sets.product_names
        trie = build_trie(prepare_values(make(k))[0])
        hidden = _progress.PhaseDisplay(show=False)
        hidden.begin("compiling")
        _common.err = Console(file=open("/dev/null", "w"), force_terminal=True, width=120)  # noqa: SIM115
        _progress.SHOW_AFTER_S = 0.0
        live = _progress.PhaseDisplay(show=True)
        variants = {
            "before": lambda t=trie: before(t, automaton, width),
            "none": lambda t=trie: walk(t, automaton, width),
            "callback": lambda t=trie, h=hidden: walk(t, automaton, width, h.step),
            "bar": lambda t=trie, b=live: walk(t, automaton, width, b.step),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        with live:
            live.begin("compiling")
            for fn in variants.values():
                fn()  # warm-up
            names = list(variants)
            for r in range(args.repeat):
                for name in names[r % 4 :] + names[: r % 4]:  # rotated: no variant always runs first
                    fn = variants[name]
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
        print(
            f"{k:>9,} {med['before']:>9.2f} {med['none']:>9.2f} {med['callback']:>9.2f} {med['bar']:>9.2f}"
            f"   {med['none'] / med['before']:>11.3f}  {med['callback'] / med['before']:>15.3f}  {med['bar'] / med['before']:>10.3f}"
        )


if __name__ == "__main__":
    main()
