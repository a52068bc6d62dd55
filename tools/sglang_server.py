"""End to end: an SGLang server with ``--grammar-backend triec``, real requests, every answer checked.

Needs a CUDA machine with SGLang's own wheels (``pip install sglang==0.5.23`` with
its CUDA torch) and triec installed in the same environment; it was not run on
the CPU-only machines triec is developed on (SGLang's model runner needs CUDA
kernels; the nox session ``sglang`` tests the backend through SGLang's classes
on CPU instead). Steps:

1. compile examples/tools.txt for the model's tokenizer into a temporary
   artifact directory (``tools.triec``) and point ``TRIEC_ARTIFACT_DIR`` at it;
2. start ``python -m sglang.launch_server --model-path MODEL --grammar-backend
   triec`` (``--launcher script``: tools/sglang_launch.py, with
   ``SGLANG_PLUGINS`` set so that the entry point is filtered out);
3. send requests to ``/generate`` and the OpenAI API: a regex choice, a json
   string enum, an artifact by name (whole and restricted), n = 2 parallel
   samples, regexes and schemas triec delegates to xgrammar, and bad requests
   that must be refused (HTTP 400 or an abort) while the server keeps serving;
4. print one line per check, stop the server, exit 1 if any check failed.

    python tools/sglang_server.py                                   # Qwen/Qwen2.5-0.5B-Instruct on port 30123
    python tools/sglang_server.py --model Qwen/Qwen2.5-7B-Instruct --launcher script
    python tools/sglang_server.py --port 30000 --no-start          # a server you started yourself (same artifacts)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COLORS = ["red", "green", "blue", "light blue"]


def post(url: str, body: dict[str, Any], timeout: float = 300) -> tuple[int, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, text


def wait_ready(base: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(2)
    raise SystemExit(f"the server was not ready after {timeout:.0f} s")


def generate(base: str, prompt: str, **sampling: Any) -> tuple[int, Any]:
    params = {"max_new_tokens": 48, "temperature": 0.7, **sampling}
    return post(base + "/generate", {"text": prompt, "sampling_params": params})


def refused(status: int, body: Any) -> bool:
    """SGLang aborts a request whose grammar fails to compile: HTTP 400, or a finish reason of type abort."""
    if status == 400:
        return True
    items = body if isinstance(body, list) else [body]
    return all(
        isinstance(b, dict) and (b.get("meta_info", {}).get("finish_reason") or {}).get("type") == "abort"
        for b in items
    )


def texts(body: Any) -> list[str]:
    return [b["text"] for b in (body if isinstance(body, list) else [body])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--launcher", choices=["entry-point", "script"], default="entry-point")
    ap.add_argument("--no-start", action="store_true", help="use a server already listening on --port")
    ap.add_argument("--ready-timeout", type=float, default=900)
    ap.add_argument("server_args", nargs="*", help="more sglang.launch_server arguments (after --)")
    args = ap.parse_args()

    import triec

    tools = [ln.strip() for ln in (ROOT / "examples" / "tools.txt").read_text().splitlines() if ln.strip()]
    vocab = triec.Vocabulary.load(args.model)  # the model's EOS ids and logits width from its configs
    artifacts = Path(os.environ.get("TRIEC_ARTIFACT_DIR") or tempfile.mkdtemp(prefix="triec-artifacts-"))
    triec.compile(tools, vocab).save(artifacts / "tools.triec")
    print(f"artifact dir {artifacts}: tools.triec ({len(tools)} values) for {vocab}")

    base = f"http://127.0.0.1:{args.port}"
    proc = None
    if not args.no_start:
        env = dict(os.environ, TRIEC_ARTIFACT_DIR=str(artifacts))
        if args.launcher == "script":
            cmd = [sys.executable, str(ROOT / "tools" / "sglang_launch.py")]
            env["SGLANG_PLUGINS"] = "not-triec"  # the entry point is filtered: the script must register itself
        else:
            cmd = [sys.executable, "-m", "sglang.launch_server"]
        cmd += ["--model-path", args.model, "--port", str(args.port), "--grammar-backend", "triec", *args.server_args]
        print("starting:", " ".join(cmd))
        proc = subprocess.Popen(cmd, env=env)
    failures = 0

    def check(name: str, ok: Callable[[], bool]) -> None:
        nonlocal failures
        try:
            good = bool(ok())
            detail = ""
        except Exception as exc:  # noqa: BLE001 - report and go on to the next check
            good, detail = False, f" ({type(exc).__name__}: {exc})"
        failures += not good
        print(f"{'PASS' if good else 'FAIL'}  {name}{detail}")

    try:
        wait_ready(base, proc, args.ready_timeout)
        ask = "Pick one: "
        color_regex = "(" + "|".join(re.escape(c) for c in COLORS) + ")"

        def regex_choice() -> bool:
            status, body = generate(base, ask, regex=color_regex)
            print("   ", status, texts(body))
            return status == 200 and texts(body)[0] in COLORS

        def json_enum() -> bool:
            status, body = generate(base, ask, json_schema=json.dumps({"type": "string", "enum": COLORS}))
            return status == 200 and json.loads(texts(body)[0]) in COLORS

        def artifact() -> bool:
            status, body = generate(
                base, "Which tool opens a GitHub issue? ", json_schema=json.dumps({"x-triec-artifact": "tools"})
            )
            print("   ", status, texts(body))
            return status == 200 and texts(body)[0] in set(tools)

        def restricted() -> bool:
            subset = tools[:3]
            schema = {"x-triec-artifact": "tools", "x-triec-restrict": subset}
            status, body = generate(base, "Which tool? ", json_schema=json.dumps(schema))
            return status == 200 and texts(body)[0] in subset

        def parallel() -> bool:
            status, body = generate(base, ask, regex=color_regex, n=2, temperature=1.0)
            return status == 200 and len(texts(body)) == 2 and all(t in COLORS for t in texts(body))

        def delegated_regex() -> bool:
            status, body = generate(base, "A word: ", regex="[a-z]{3,8}")
            return status == 200 and re.fullmatch("[a-z]{3,8}", texts(body)[0]) is not None

        def delegated_schema() -> bool:
            schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
            status, body = generate(base, "A JSON object: ", json_schema=json.dumps(schema))
            return status == 200 and isinstance(json.loads(texts(body)[0])["n"], int)

        def bad_artifact() -> bool:
            status, body = generate(base, ask, json_schema=json.dumps({"x-triec-artifact": "../etc/passwd"}))
            return refused(status, body)

        def missing_artifact() -> bool:
            status, body = generate(base, ask, json_schema=json.dumps({"x-triec-artifact": "no-such-artifact"}))
            return refused(status, body)

        def openai_chat() -> bool:
            body = {
                "model": args.model,
                "max_tokens": 48,
                "messages": [{"role": "user", "content": "Pick a color."}],
                "regex": color_regex,
            }
            status, reply = post(base + "/v1/chat/completions", body)
            return status == 200 and reply["choices"][0]["message"]["content"] in COLORS

        def openai_response_format() -> bool:
            body = {
                "model": args.model,
                "max_tokens": 48,
                "messages": [{"role": "user", "content": "Which tool lists repos?"}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "tool", "schema": {"x-triec-artifact": "tools"}},
                },
            }
            status, reply = post(base + "/v1/chat/completions", body)
            return status == 200 and reply["choices"][0]["message"]["content"] in set(tools)

        def still_serving() -> bool:
            return regex_choice()

        for name, fn in [
            ("regex alternation served by triec", regex_choice),
            ("json string enum", json_enum),
            ("artifact by name", artifact),
            ("artifact restricted to 3 values", restricted),
            ("n = 2 parallel samples (copy)", parallel),
            ("regex delegated to xgrammar", delegated_regex),
            ("object schema delegated to xgrammar", delegated_schema),
            ("artifact name with a path: refused", bad_artifact),
            ("missing artifact: refused", missing_artifact),
            ("OpenAI chat with a regex", openai_chat),
            ("OpenAI response_format naming an artifact", openai_response_format),
            ("still serving after refusals", still_serving),
        ]:
            check(name, fn)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("all checks passed" if failures == 0 else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
