"""Offline beam search in real vLLM CPU engines: triec's (:func:`triec.integrations.vllm.beams.beam_search`), vLLM's
own with xgrammar, and a brute-force reference; one JSON report.

Run by tests/test_vllm_beams.py in a subprocess (two engines, one after the other, on the tiny random Llama):

* a stock engine (``backend="xgrammar"``): first the ``tree`` value set is grown from the model's own raw top tokens
  (every value a path of raw top-5 tokens, so vLLM's filter of the raw top-2W keeps what an exact search keeps);
  then vLLM's ``LLM.beam_search`` with xgrammar on every case, and the **reference**: the same loop as vLLM's, each
  beam's candidates its top-2W allowed tokens by the raw log-probabilities of *all* its allowed tokens
  (``logprob_token_ids``), the allowed set found by brute force over token bytes (token t after text p iff p +
  bytes(t) is a prefix of a value; EOS iff p is a value);
* an engine built with ``engine_args`` running triec's beam search on the same cases, on an artifact by name and
  on a triec table; then vLLM's own ``LLM.beam_search`` with the plugin's ``beam_search`` route installed: a
  ``choice`` reaches triec's search, no constraint reaches vLLM's.

usage: python vllm_beams_driver.py WORKDIR OUT.json
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

W = 4
MAX_TOKENS = 16
PROMPTS = ["Select a tool:", "Which one? "]


def seqs(outputs: list, prompt_lens: list[int]) -> list[list[dict]]:
    return [
        [{"ids": s.tokens[n:], "cum": s.cum_logprob, "text": s.text} for s in o.sequences]
        for o, n in zip(outputs, prompt_lens[: len(outputs)], strict=True)
    ]


def grow_tree(llm, prompt_ids: list[int], token_bytes: list[bytes], depth: int, branch: int) -> list[str]:
    """Values spelled by paths of the model's raw top tokens (clean UTF-8 tokens, no quotes or backslashes)."""
    from vllm import SamplingParams, TokensPrompt

    level = [[]]
    for _ in range(depth):
        outs = llm.generate(
            [TokensPrompt(prompt_token_ids=prompt_ids + p) for p in level],
            SamplingParams(max_tokens=1, logprobs=16, temperature=0.0),
            use_tqdm=False,
        )
        nxt = []
        for path, out in zip(level, outs, strict=True):
            ranked = sorted(out.outputs[0].logprobs[0].items(), key=lambda kv: kv[1].rank)
            kids = []
            for tok, _lp in ranked:
                b = token_bytes[tok]
                try:
                    text = b.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if b and text.isprintable() and '"' not in text and "\\" not in text:
                    kids.append(tok)
                if len(kids) == branch:
                    break
            nxt.extend([*path, k] for k in kids)
        level = nxt
    return sorted({b"".join(token_bytes[t] for t in p).decode("utf-8") for p in level})


def reference(llm, prompt_ids: list[int], spelled: list[bytes], token_bytes: list[bytes], eos: int) -> list[dict]:
    """vLLM's beam loop, each beam's candidates the top-2W of all its allowed tokens (brute force)."""
    from vllm import SamplingParams, TokensPrompt

    prefixes = {v[:i] for v in spelled for i in range(len(v) + 1)}
    values = set(spelled)
    beams = [([], 0.0, b"")]
    completed = []

    def key(ids: list[int], cum: float) -> float:
        n = len(prompt_ids) + len(ids) - (1 if ids and ids[-1] == eos else 0)
        return cum / max(n, 1)

    for _ in range(MAX_TOKENS):
        if not beams:
            break
        allowed = []
        for _ids, _cum, text in beams:
            ok = [t for t, b in enumerate(token_bytes) if b and text + b in prefixes]
            allowed.append(ok + ([eos] if text in values else []))
        assert all(0 < len(a) <= 128 for a in allowed), [len(a) for a in allowed]
        outs = llm.generate(
            [TokensPrompt(prompt_token_ids=prompt_ids + ids) for ids, _, _ in beams],
            [SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=a) for a in allowed],
            use_tqdm=False,
        )
        new = []
        for (ids, cum, text), ok, out in zip(beams, allowed, outs, strict=True):
            lps = out.outputs[0].logprobs[0]
            scored = sorted(((lps[t].logprob, -t) for t in ok), reverse=True)[: 2 * W]
            for lp, neg in scored:
                t = -neg
                if t == eos:
                    completed.append(([*ids, t], cum + lp))
                else:
                    new.append(([*ids, t], cum + lp, text + token_bytes[t]))
        new.sort(key=lambda b: key(b[0], b[1]), reverse=True)
        beams = new[:W]
    completed.extend((ids, cum) for ids, cum, _ in beams)
    completed.sort(key=lambda b: key(b[0], b[1]), reverse=True)
    return [{"ids": ids, "cum": cum} for ids, cum in completed[:W]]


def shutdown(llm) -> None:
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()


def main() -> None:
    from vllm import LLM
    from vllm.sampling_params import BeamSearchParams
    from vllm.sampling_params import StructuredOutputsParams as SO

    import triec
    import triec.synthetic.sets
    from benchmarks.tiny_llama import make_tiny_llama
    from triec.integrations.serving import served_vocabulary
    from triec.integrations.vllm import beams, internals

    root, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    model = make_tiny_llama(root / "model")
    common = {"model": str(model), "max_model_len": 256, "enforce_eager": True, "seed": 0, "dtype": "float32"}
    vocab = served_vocabulary(str(model), 151_936)
    token_bytes = list(vocab.token_bytes)
    names = triec.synthetic.sets.tool_names(200)
    report: dict = {"cases": {}}

    llm = LLM(**common, max_logprobs=16, structured_outputs_config={"backend": "xgrammar"})
    tok = llm.get_tokenizer()
    eos = tok.eos_token_id
    prompt_ids = [tok.encode(p) for p in PROMPTS]
    tree = grow_tree(llm, prompt_ids[0], token_bytes, depth=3, branch=5)
    enum = {"type": "string", "enum": names}
    cases = {  # name -> (prompts, triec's constraint, xgrammar's, the spelled values)
        "enum": (PROMPTS, SO(json=enum), SO(json=enum), [json.dumps(v).encode() for v in names]),
        "tree": (
            PROMPTS[:1],
            SO(choice=tree),
            SO(grammar=internals.choice_as_grammar(tree)),
            [v.encode() for v in tree],
        ),
    }
    lens = [len(p) for p in prompt_ids]
    for name, (prompts, _ours, xgr, spelled) in cases.items():
        params = BeamSearchParams(beam_width=W, max_tokens=MAX_TOKENS, structured_outputs=xgr)
        report["cases"][name] = {
            "values": [v.decode() for v in spelled],
            "xgrammar": seqs(llm.beam_search([{"prompt": p} for p in prompts], params), lens[: len(prompts)]),
            "reference": [reference(llm, prompt_ids[i], spelled, token_bytes, eos) for i in range(len(prompts))],
        }
    try:
        llm.beam_search(
            [{"prompt": PROMPTS[0]}], BeamSearchParams(beam_width=W, max_tokens=4, structured_outputs=SO(choice=names))
        )
        report["xgrammar_choice"] = "ran"
    except Exception as exc:  # noqa: BLE001  recorded: vLLM's xgrammar refuses a choice in beam search
        report["xgrammar_choice"] = f"{type(exc).__name__}: {exc}"
    plain = [{"prompt": p} for p in PROMPTS]
    report["unconstrained_stock"] = seqs(llm.beam_search(plain, BeamSearchParams(beam_width=W, max_tokens=4)), lens)
    shutdown(llm)

    art = root / "artifacts"
    art.mkdir(exist_ok=True)
    table = triec.compile(names, vocab)
    table.save(art / "tools.triec")
    os.environ["TRIEC_ARTIFACT_DIR"] = str(art)
    llm = LLM(**common, **beams.engine_args(W))
    for name, (prompts, ours, _xgr, _spelled) in cases.items():
        params = BeamSearchParams(beam_width=W, max_tokens=MAX_TOKENS, structured_outputs=ours)
        report["cases"][name]["triec"] = seqs(beams.beam_search(llm, [{"prompt": p} for p in prompts], params), lens)
    params = BeamSearchParams(beam_width=W, max_tokens=MAX_TOKENS)
    prompts = [{"prompt": p} for p in PROMPTS]
    report["artifact"] = {
        "values": names,
        "by_name": seqs(beams.beam_search(llm, prompts, params, SO(json={"x-triec-artifact": "tools"})), lens),
        "table": seqs(beams.beam_search(llm, prompts, params, table), lens),
        "choice": seqs(beams.beam_search(llm, prompts, params, SO(choice=names)), lens),
    }
    from triec.integrations.vllm import patches

    patches.install(("beam_search",))  # what the plugin installs with TRIEC_VLLM_BACKEND=1 (this process keeps
    # vLLM's own structured outputs: the xgrammar engine above is the comparison)
    hooked = BeamSearchParams(beam_width=W, max_tokens=MAX_TOKENS, structured_outputs=SO(choice=names))
    report["hooked_choice"] = seqs(llm.beam_search(prompts, hooked), lens)
    report["unconstrained"] = seqs(llm.beam_search(prompts, BeamSearchParams(beam_width=W, max_tokens=4)), lens)
    shutdown(llm)
    report["eos"] = eos
    out_path.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
