"""triec inside vLLM's own scale-out on CPU (issue 22): tensor parallel 2 (``LLM``) and data parallel 2 (the server).

Each engine runs the same greedy requests (tests/scaleout_cases.py: artifacts by
name through the processors, a restricted subset, a tool-call schema artifact;
a ``choice`` and an artifact named in a JSON schema through the backend), and
every output must be valid and equal, token for token, to a single engine's
(TP=1). Every TP worker and DP replica reads the same ``TRIEC_ARTIFACT_DIR``.
The engines run in subprocesses (the backend's frontend hook is process-wide).
vLLM's Ray executor is not tested: vLLM 0.32's CPU platform has no Ray device key
(``ray_device_key = ""``), so ``initialize_ray_cluster`` refuses it on CPU.
Requires vLLM and openai (the ``vllm`` nox session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")
pytest.importorskip("jsonschema")

from scaleout_cases import check, make_artifacts, requests  # noqa: E402

from benchmarks.vllm_server import SERVER_ENV, free_port, stop_group, wait_ready  # noqa: E402

DRIVER = Path(__file__).with_name("vllm_scaleout_driver.py")
ENV = {"TRIEC_VLLM_BACKEND": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def engine_env(art: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, **SERVER_ENV, TRIEC_ARTIFACT_DIR=str(art), **ENV, **extra)
    env.pop("VLLM_PLUGINS", None)
    return env


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scaleout")
    make_artifacts(root)
    return root


def run_llm(root: Path, tp: int) -> dict:
    out = root / f"tp{tp}.json"
    if out.is_file():
        return json.loads(out.read_text())
    extra = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"} if tp == 2 else {}
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(root), str(out), str(tp)],
        capture_output=True,
        text=True,
        timeout=900,
        env=engine_env(root / "artifacts", **extra),
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "triec vLLM backend on" in proc.stdout + proc.stderr  # the backend serves the choice and JSON requests
    report = json.loads(out.read_text())
    report["wall_s"] = round(time.perf_counter() - t, 1)
    print(f"TP={tp}: engine start {report['start_s']} s, generate {report['generate_s']} s, wall {report['wall_s']} s")
    return report


def assert_valid(outputs: list[dict]) -> None:
    for req, out in zip(requests(), outputs, strict=True):
        why = check(req, out["text"], out["finish"])
        assert why is None, (req["prompt"], why)


def test_tensor_parallel_2_equals_one_engine(root: Path) -> None:
    one, two = run_llm(root, 1), run_llm(root, 2)
    assert_valid(one["outputs"])
    assert_valid(two["outputs"])
    assert [o["ids"] for o in two["outputs"]] == [o["ids"] for o in one["outputs"]]


def test_data_parallel_2_server_equals_one_engine(root: Path) -> None:
    one = run_llm(root, 1)
    art, port = root / "artifacts", free_port()
    log_path = root / "dp_server.log"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(root / "model"),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-parallel-size",
        "2",
        "--logits-processors",
        "triec.integrations.vllm:TriecLogitsProcessor",
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--seed",
        "0",
    ]
    t = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            env=engine_env(art, VLLM_CPU_OMP_THREADS_BIND="0|1"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
            wait_ready(client, proc, log_path)
            start_s = time.perf_counter() - t

            def send(req: dict):
                extra = {"return_token_ids": True}
                if "xargs" in req:
                    extra["vllm_xargs"] = req["xargs"]
                else:
                    extra["structured_outputs"] = req["structured_outputs"]
                return client.completions.create(
                    model="tiny", prompt=req["prompt"], max_tokens=req["max_tokens"], temperature=0.0, extra_body=extra
                ).choices[0]

            reqs = requests() * 2  # concurrent, so that both replicas serve
            with ThreadPoolExecutor(len(reqs)) as pool:
                got = list(pool.map(send, reqs))
            outputs = [{"text": c.text, "ids": list(c.token_ids), "finish": c.finish_reason} for c in got]
            print(f"DP=2 server: start {start_s:.0f} s, requests {time.perf_counter() - t - start_s:.1f} s")
        finally:
            stop_group(proc)
    log = log_path.read_text()
    assert "EngineCore_DP0" in log and "EngineCore_DP1" in log  # two engine cores (replicas) served
    assert log.count("triec vLLM backend on") >= 3  # the frontend and both engine cores
    n = len(requests())
    for half in (outputs[:n], outputs[n:]):
        assert_valid(half)
        assert [o["ids"] for o in half] == [o["ids"] for o in one["outputs"]]
