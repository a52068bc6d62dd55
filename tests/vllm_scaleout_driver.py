"""One vLLM CPU engine (``LLM``) with triec's processors and backend at a given tensor-parallel size; one JSON report.

Run by tests/test_vllm_scaleout.py in a subprocess (the backend's frontend
replacement is process-wide, and each engine needs its own OMP binding). The
requests: artifacts by name through the processors (plain, restricted, a
tool-call schema artifact), and through the backend a ``choice`` list and an
artifact named in a JSON schema; all greedy, small ``max_tokens``.

usage: python vllm_scaleout_driver.py WORKDIR OUT.json TP
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a script's sys.path[0] is its folder: benchmarks/ (the tiny Llama) is the checkout's
    sys.path.append(str(ROOT))

from scaleout_cases import COLORS, TOOL_CALL, make_artifacts, requests  # noqa: E402 - the script's folder is sys.path[0]


def main() -> None:
    root, out_path, tp = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    model, art, _ = make_artifacts(root)
    os.environ["TRIEC_ARTIFACT_DIR"] = str(art)
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams as SO

    t = time.perf_counter()
    llm = LLM(
        model=str(model),
        logits_processors=["triec.integrations.vllm:TriecLogitsProcessor"],
        tensor_parallel_size=tp,
        max_num_seqs=8,
        max_model_len=256,
        enforce_eager=True,
        seed=0,
    )
    start_s = time.perf_counter() - t
    prompts, params = [], []
    for r in requests():
        so = SO(**r["structured_outputs"]) if "structured_outputs" in r else None
        prompts.append(r["prompt"])
        params.append(
            SamplingParams(
                max_tokens=r["max_tokens"], temperature=0.0, extra_args=r.get("xargs"), structured_outputs=so
            )
        )
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    report = {
        "tp": tp,
        "start_s": round(start_s, 1),
        "generate_s": round(time.perf_counter() - t, 2),
        "outputs": [
            {"text": o.outputs[0].text, "ids": list(o.outputs[0].token_ids), "finish": o.outputs[0].finish_reason}
            for o in outs
        ],
    }
    out_path.write_text(json.dumps(report))
    assert COLORS and TOOL_CALL
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
