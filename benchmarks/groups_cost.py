"""What group-then-value decoding costs against the flat trie, on BFCL's function names (issue 52, item 2).

The names: every distinct function name with its description in the installed ``bfcl-eval`` data (1,853 across
its categories; :func:`bfcl_functions`). They are grouped by k-means (G = round(sqrt(K)) = 43, seed 0) over word
TF-IDF vectors of name and description (:func:`triec.compiler.groups.term_vectors`), the grouped table compiled
for SmolLM2-135M's tokenizer, and for every name:

- **tokens written**: flat, the name's own encoder tokens; grouped, ``label + " > "``'s tokens (round 1, ending at
  the separator) plus the name's (round 2), each as the tokenizer encodes it (the path a model that writes
  naturally takes; any other is allowed too);
- **steps** (greedy picks, a forward pass's logits each): tokens written plus one for EOS; grouped adds a prefill;
- **prompt tokens** of the listings (``- name: description`` lines): flat, all K; grouped, round 1's G labels with
  four names each plus round 2's group (mean over names);
- the table's size, states and compile time (after a first, untimed compile), flat and grouped, side by side.

With ``--model N`` it then decodes N of BFCL's one-call questions (``triec bfcl all --candidates all``, every
len/N-th; candidates: all 1,853 names) with the 135M model, one torch thread: the groups strategy
(:class:`triec.eval.groups_strategy.GroupsStrategy`), and the flat trie on the same question (its prompt lists no
function, as ``triec bfcl all`` writes it: a 1,853-line listing does not fit the model's 8,192-token context), and
prints tokens, steps, prompt tokens, seconds (medians), validity and accuracy. ``python -m benchmarks.groups_cost [--model N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def bfcl_functions() -> dict[str, str]:
    """name -> description of every function in the installed bfcl-eval's question files (``triec bfcl``'s
    catalog: 1,853 names)."""
    from triec.eval.bfcl import data_dir
    from triec.eval.bfcl_catalog import catalog

    return dict(catalog(data_dir()).descriptions)


def static_costs(functions: dict[str, str], tokenizer_dir: Any) -> dict[str, Any]:
    from transformers import AutoTokenizer

    import triec
    from triec.compiler.groups import DEFAULT_SEPARATOR, compile_grouped, groups_by_kmeans, term_vectors
    from triec.runtime.groups import group_members

    names = list(functions)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = triec.Vocabulary.load(tokenizer_dir)

    def n(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    triec.compile(names, vocab)  # a first compile warms what every compile then reuses (the automaton and more)
    t0 = time.perf_counter()
    group_of = groups_by_kmeans(names, term_vectors([f"{v} {functions[v]}" for v in names]), seed=0)
    t1 = time.perf_counter()
    grouped = compile_grouped(names, group_of, vocab)
    t2 = time.perf_counter()
    flat = triec.compile(names, vocab)
    t3 = time.perf_counter()
    members = group_members(grouped)
    flat_tokens = [n(v) for v in names]
    round1 = {label: n(label + DEFAULT_SEPARATOR) for label in members}
    grouped_tokens = [round1[group_of[v]] + n(v) for v in names]
    line = {v: n(f"- {v}: {functions[v]}\n") for v in names}
    listing1 = sum(n(f"- {lb}: {', '.join(vs[:4])}{', ...' if len(vs) > 4 else ''}\n") for lb, vs in members.items())
    listing2 = {lb: sum(line[v] for v in vs) for lb, vs in members.items()}
    sizes = sorted(len(vs) for vs in members.values())
    return {
        "K": len(names),
        "G": len(members),
        "group_sizes": {"min": sizes[0], "median": statistics.median(sizes), "max": sizes[-1]},
        "tokens_written": {
            "flat_mean": statistics.mean(flat_tokens),
            "grouped_mean": statistics.mean(grouped_tokens),
            "label_and_separator_mean": statistics.mean(round1[group_of[v]] for v in names),
        },
        "steps_mean": {"flat": statistics.mean(flat_tokens) + 1, "grouped": statistics.mean(grouped_tokens) + 1},
        "prefills": {"flat": 1, "grouped": 2},
        "listing_tokens": {
            "flat": sum(line.values()),
            "grouped_round1": listing1,
            "grouped_round2_mean": statistics.mean(listing2[group_of[v]] for v in names),
        },
        "table": {
            "flat": {"states": flat.num_states, "pairs": flat.num_allowed, "compile_s": round(t3 - t2, 3)},
            "grouped": {"states": grouped.num_states, "pairs": grouped.num_allowed, "compile_s": round(t2 - t1, 3)},
            "kmeans_s": round(t1 - t0, 3),
        },
    }


def model_costs(functions: dict[str, str], model_dir: Any, count: int) -> dict[str, Any]:
    import torch

    from triec.eval.bfcl import convert
    from triec.eval.data import parse_item
    from triec.eval.groups_strategy import GroupsStrategy
    from triec.eval.run import EvalConfig, Evaluator

    torch.set_num_threads(1)
    names = list(functions)
    docs = convert("all", candidates="all")  # every one-call category; a prompt listing no function
    items = [parse_item({**d, "candidates": names}, "bfcl", i) for i, d in enumerate(docs[:: len(docs) // count])]
    items = items[:count]
    ev = Evaluator(model_dir, EvalConfig(modes=("trie",), max_new_tokens=48))
    strategy = GroupsStrategy(ev, descriptions=functions)
    from triec.runtime.groups import group_members

    gold_group = {v: lb for lb, vs in group_members(strategy.table(tuple(names))).items() for v in vs}
    rows: dict[str, list[Any]] = {k: [] for k in ("g_tok", "g_steps", "g_s", "g_p1", "g_p2", "f_tok", "f_steps")}
    rows.update(f_s=[], f_p=[], g_valid=[], g_correct=[], g_group=[], f_correct=[])
    for item in items:
        got = strategy.answer(item)
        rows["g_tok"].append(got.tokens)
        rows["g_steps"].append(got.steps)
        rows["g_s"].append(got.seconds)
        rows["g_p1"].append(got.prompt_tokens[0])
        rows["g_p2"].append(got.prompt_tokens[-1])
        rows["g_valid"].append(got.valid)
        rows["g_correct"].append(got.answer == item.gold)
        rows["g_group"].append(got.group == gold_group[item.gold])
        prompt = tuple(ev.prompt_ids(item, "trie"))
        flat = ev.decode(prompt, "trie", tuple(names), "triec", 48)
        rows["f_tok"].append(len(flat.ids))
        rows["f_steps"].append(len(flat.ids) + int(flat.finished))
        rows["f_s"].append(flat.seconds)
        rows["f_p"].append(len(prompt))
        rows["f_correct"].append(ev.text(flat.ids) == item.gold)
    med = {
        k: statistics.median(v) for k, v in rows.items() if k not in ("g_valid", "g_correct", "g_group", "f_correct")
    }
    return {
        "items": len(items),
        "medians": med,
        "groups_valid": sum(rows["g_valid"]),
        "groups_correct": sum(rows["g_correct"]),
        "groups_right_group": sum(rows["g_group"]),
        "flat_correct": sum(rows["f_correct"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=int, default=0, help="decode this many BFCL questions with the 135M model")
    args = parser.parse_args()
    from triec.eval.gguf_model import models_dir, prepare

    model_dir = prepare(root=models_dir())
    functions = bfcl_functions()
    print(json.dumps(static_costs(functions, model_dir), indent=1))
    if args.model:
        print(json.dumps(model_costs(functions, model_dir, args.model), indent=1))


if __name__ == "__main__":
    main()
