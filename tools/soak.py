"""Soak test of vLLM's OpenAI server with triec inside (issue 22): concurrent clients, hostile requests, file faults.

Starts ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (CPU, the tiny
random-weight Llama of tests/tiny_llama.py, nothing downloaded) with triec's
logits processors (``--logits-processors``) and its structured-outputs backend
(``TRIEC_VLLM_BACKEND=1``), then runs ``--clients`` threads for ``--duration``
seconds (or ``--max-requests``), each sending a random mix:

- ``xargs``: an artifact by name through the processors (``vllm_xargs``);
- ``restrict``: the same narrowed to a fresh random subset;
- ``choice_new`` / ``choice_repeat``: ``structured_outputs.choice``, a new list each time or one list;
- ``backend_artifact``: ``response_format`` with ``{"x-triec-artifact": NAME}`` (the backend);
- ``tools``: ``tools`` with ``tool_choice="required"`` (hermes parser, one call);
- ``delegated``: a regex that is not a literal alternation (xgrammar serves it);
- ``free``: unconstrained;
- ``fault_xargs`` / ``fault_backend``: the artifact that a fault thread keeps replacing by rename, overwriting in
  place, truncating, deleting and re-creating half-written;
- ``hostile``: bad names, path escapes, lists past the limits, malformed lists, wrong types, oversized bodies.

Every constrained output is checked against its set or schema. A fault request
must give a value of either version of its artifact, a 400 naming the fault, or
end at once (empty text, or an error finish). Printed: requests per kind,
p50/p99 latency, outcomes, faults injected, RSS of the server's process tree at
start, after warm-up and at the end. Exits 1 on an invalid output, a hostile
request not answered 400, any other failed request, an engine process that died
or the server gone, or RSS growth after warm-up above ``--rss-bound-mb``
(default: 2 x ``TRIEC_CACHE_BYTES`` (the backend's compiled-table cache, one in
the frontend and one in the engine) + 160 MiB for the processors' subset and
device-table caches (256 entries each), allocator and vLLM noise).

    python tools/soak.py --quick          # about 40 s of requests after a ~60 s start (the vllm session runs it)
    python tools/soak.py --duration 600 --clients 8 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (sys.path[0] = tools/): benchmarks/ is the checkout's
    sys.path.append(str(ROOT))

from benchmarks.vllm_server import SERVER_ENV, TOOLS, ServerDidNotStart, free_port, stop_group, wait_ready  # noqa: E402

CACHE_BYTES = 32 << 20
COLORS = ["red", "green", "blue", "re", "redder", "yellow"]
FLIP = {"a": ["alpha", "bravo", "charlie"], "b": ["delta", "echo", "foxtrot"]}
REGEX = r"[a-z]{2,6}-[0-9]{2}"
FAULT_MESSAGES = re.compile(r"not a valid triec artifact|no artifact named|being written|cannot be read|is empty")
WEIGHTS = {
    "xargs": 3,
    "restrict": 2,
    "choice_new": 2,
    "choice_repeat": 2,
    "backend_artifact": 2,
    "tools": 1,
    "delegated": 1,
    "free": 1,
    "fault_xargs": 2,
    "fault_backend": 1,
    "hostile": 3,
}


def hostile_bodies(tools: list[str]) -> list[tuple[str, str, dict]]:
    """(label, endpoint, extra request fields) of requests that must be answered 400."""
    so = "structured_outputs"
    many = [f"v{i}" for i in range(6000)]
    return [
        ("unknown name", "c", {"extra_body": {"vllm_xargs": {"triec": "nope"}}}),
        ("path escape", "c", {"extra_body": {"vllm_xargs": {"triec": "../colors"}}}),
        ("absolute path", "c", {"extra_body": {"vllm_xargs": {"triec": "/etc/passwd"}}}),
        ("slash", "c", {"extra_body": {"vllm_xargs": {"triec": "a/b"}}}),
        ("dots", "c", {"extra_body": {"vllm_xargs": {"triec": ".."}}}),
        ("name not a string", "c", {"extra_body": {"vllm_xargs": {"triec": 5}}}),
        ("restrict not a list", "c", {"extra_body": {"vllm_xargs": {"triec": "colors", "restrict": 5}}}),
        ("restrict empty", "c", {"extra_body": {"vllm_xargs": {"triec": "colors", "restrict": []}}}),
        ("restrict unknown value", "c", {"extra_body": {"vllm_xargs": {"triec": "colors", "restrict": ["teal"]}}}),
        ("restrict non-strings", "c", {"extra_body": {"vllm_xargs": {"triec": "colors", "restrict": [1, 2]}}}),
        (
            "restrict past the limit",
            "c",
            {"extra_body": {"vllm_xargs": {"triec": "tools", "restrict": [f"v{i}" for i in range(100_001)]}}},
        ),
        ("restrict without name", "c", {"extra_body": {"vllm_xargs": {"restrict": ["red"]}}}),
        ("min_tokens with triec", "c", {"extra_body": {"vllm_xargs": {"triec": "colors"}, "min_tokens": 2}}),
        (
            "triec and structured_outputs",
            "c",
            {"extra_body": {"vllm_xargs": {"triec": "colors"}, so: {"choice": ["a", "b"]}}},
        ),
        ("empty choice", "c", {"extra_body": {so: {"choice": []}}}),
        ("non-string member", "c", {"extra_body": {so: {"choice": ["red", 3]}}}),
        ("choice not a list", "c", {"extra_body": {so: {"choice": "red"}}}),
        ("choice past the limit", "c", {"extra_body": {so: {"choice": many}}}),
        ("choice past the byte limit", "c", {"extra_body": {so: {"choice": ["x" * 600_000, "y" * 600_000]}}}),
        ("enum past the limit", "c", {"extra_body": {so: {"json": {"enum": many}}}}),
        ("artifact path escape", "c", {"extra_body": {so: {"json": {"x-triec-artifact": "../colors"}}}}),
        ("artifact unknown", "c", {"extra_body": {so: {"json": {"x-triec-artifact": "nope"}}}}),
        ("artifact not a string", "c", {"extra_body": {so: {"json": {"x-triec-artifact": 5}}}}),
        (
            "artifact restrict malformed",  # a lone string is one value (serving.restrict_values): a map is not
            "c",
            {"extra_body": {so: {"json": {"x-triec-artifact": "colors", "x-triec-restrict": {"red": True}}}}},
        ),
        (
            "artifact extra keyword",
            "c",
            {"extra_body": {so: {"json": {"x-triec-artifact": "colors", "type": "string"}}}},
        ),
        ("oversized prompt", "c", {"prompt": "word " * 3000}),
        (
            "bad tool schema",
            "chat",
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
                        },
                    }
                ],
                "tool_choice": "required",
                "parallel_tool_calls": False,
            },
        ),
    ]


def tree_rss(pid: int, by_name: dict[str, int] | None = None) -> tuple[int, set[int]]:
    """(RSS bytes of the process and all its descendants, their pids); ``by_name`` gets MiB per process title."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, set()
    total, pids = 0, set()
    for q in procs:
        try:
            rss = q.memory_info().rss
            total += rss
            pids.add(q.pid)
            if by_name is not None:
                name = "api_server" if q.pid == pid else q.name()
                by_name[name] = by_name.get(name, 0) + rss // 2**20
        except psutil.NoSuchProcess:
            pass
    return total, pids


class Faults(threading.Thread):
    """Keeps changing ``flip.triec``: rename-replace, in-place overwrite, truncation, deletion, half-written file."""

    KINDS = ("rename", "overwrite", "truncate", "delete", "half_written")

    def __init__(self, art: Path, blobs: dict[str, bytes], every: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.path, self.blobs, self.every, self.stop = art / "flip.triec", blobs, every, stop
        self.current = "a"
        self.done: Counter[str] = Counter()
        self.error: BaseException | None = None

    def other(self) -> bytes:
        self.current = "b" if self.current == "a" else "a"
        return self.blobs[self.current]

    def rename_in(self, data: bytes) -> None:
        tmp = self.path.with_name(".flip.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.wait(self.every):
                kind = self.KINDS[i % len(self.KINDS)]
                i += 1
                hold = min(1.0, self.every / 2)
                if kind == "rename":
                    self.rename_in(self.other())
                elif kind == "overwrite":
                    with open(self.path, "r+b") as fh:
                        fh.write(self.other())
                        fh.truncate()
                elif kind == "truncate":
                    os.truncate(self.path, self.path.stat().st_size // 2)
                    time.sleep(hold)
                    self.rename_in(self.other())
                elif kind == "delete":
                    self.path.unlink()
                    time.sleep(hold)
                    self.rename_in(self.other())
                else:
                    self.path.unlink()
                    data = self.other()
                    with open(self.path, "wb") as fh:
                        fh.write(data[: len(data) // 2])
                        fh.flush()
                        time.sleep(hold)
                        fh.write(data[len(data) // 2 :])
                self.done[kind] += 1
        except BaseException as exc:  # noqa: BLE001 - reported as a failure
            self.error = exc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of requests (default 300)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0: no count bound)")
    ap.add_argument("--quick", action="store_true", help="40 s of requests, 6 clients (the vllm session's variant)")
    ap.add_argument(
        "--warmup", type=float, default=None, help="seconds before the RSS baseline (default: a quarter, at most 60)"
    )
    ap.add_argument(
        "--fault-every", type=float, default=None, help="seconds between faults (default 3, 2 with --quick)"
    )
    ap.add_argument("--rss-bound-mb", type=float, default=None, help="allowed RSS growth after warm-up, MiB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--workdir", help="keep the model, artifacts and server log here (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.clients = min(args.duration, 40.0), min(args.clients, 6)
    warmup = args.warmup if args.warmup is not None else min(args.duration / 4, 60.0)
    fault_every = args.fault_every or (2.0 if args.quick else 3.0)
    bound_mb = args.rss_bound_mb if args.rss_bound_mb is not None else 2 * CACHE_BYTES / 2**20 + 160

    import jsonschema
    import openai

    import triec
    import triec.synthetic.sets
    from benchmarks.tiny_llama import make_tiny_llama

    root = Path(args.workdir or tempfile.mkdtemp(prefix="triec-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    model = make_tiny_llama(root / "model")
    vocab = triec.Vocabulary.load(model)
    art = root / "artifacts"
    art.mkdir(exist_ok=True)
    tool_names = list(triec.synthetic.sets.tool_names(1000))
    triec.compile(tool_names, vocab).save(art / "tools.triec")
    triec.compile(COLORS, vocab).save(art / "colors.triec")
    blobs = {}
    for k, values in FLIP.items():
        triec.compile(values, vocab).save(root / f"flip-{k}.triec")
        blobs[k] = (root / f"flip-{k}.triec").read_bytes()
    (art / "flip.triec").write_bytes(blobs["a"])
    sets = {"tools": set(tool_names), "colors": set(COLORS), "flip": set(FLIP["a"]) | set(FLIP["b"])}

    port = free_port()
    env = dict(
        os.environ,
        **SERVER_ENV,
        TRIEC_VLLM_BACKEND="1",
        TRIEC_MAX_CHOICES="5000",
        TRIEC_MAX_CHOICE_BYTES=str(1 << 20),
        TRIEC_CACHE_BYTES=str(CACHE_BYTES),
        TRIEC_ARTIFACT_DIR=str(art),
        VLLM_ENFORCE_STRICT_TOOL_CALLING="0",
        VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("VLLM_PLUGINS", None)
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--logits-processors",
        "triec.integrations.vllm:TriecLogitsProcessor",
        "--chat-template",
        str(ROOT / "tests" / "qwen25_tools.jinja"),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
    ]
    log_path = root / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    t_start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failures: list[str] = []
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=180, max_retries=0)
        try:
            wait_ready(client, proc, log_path, timeout_s=600)
        except ServerDidNotStart as exc:
            print(exc, file=sys.stderr)
            return 1
        startup_s = time.monotonic() - t_start
        rss_start, pids_start = tree_rss(proc.pid)
        print(
            f"server up in {startup_s:.0f} s, {len(pids_start)} processes, RSS {rss_start / 2**20:.0f} MiB; "
            f"{args.clients} clients for {args.duration:.0f} s (warm-up {warmup:.0f} s)",
            flush=True,
        )

        hostile = hostile_bodies(tool_names)
        by_tool = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        repeat_list = [f"opt{i}" for i in range(40)]
        lat: dict[str, list[float]] = defaultdict(list)
        outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        hostile_bad: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()
        count = [0]
        kinds, weights = zip(*WEIGHTS.items(), strict=True)

        def comp(prompt: str, max_tokens: int = 24, **kw):
            return client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, **kw).choices[0]

        def chat(content: str, max_tokens: int = 40, **kw):
            return client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": content}], max_tokens=max_tokens, **kw
            ).choices[0]

        def one(kind: str, rng: random.Random) -> str:
            """Send one request of ``kind``; returns its outcome (``invalid...`` / ``failed...`` are failures)."""
            temp = rng.choice([0.0, 1.0])
            n = rng.randrange(1 << 30)
            if kind == "xargs":
                name = rng.choice(["tools", "colors"])
                c = comp(f"Pick #{n}:", extra_body={"vllm_xargs": {"triec": name}}, temperature=temp)
                return "valid" if c.text in sets[name] and c.finish_reason == "stop" else f"invalid {name}: {c.text!r}"
            if kind == "restrict":
                subset = rng.sample(tool_names, rng.randint(2, 40))
                c = comp(
                    f"Tool #{n}:", extra_body={"vllm_xargs": {"triec": "tools", "restrict": subset}}, temperature=temp
                )
                return "valid" if c.text in subset and c.finish_reason == "stop" else f"invalid restrict: {c.text!r}"
            if kind in ("choice_new", "choice_repeat"):
                if kind == "choice_new":
                    size = round(2 ** rng.uniform(1, 11))
                    values = sorted(
                        {"".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(size)}
                    )
                else:
                    values = repeat_list
                c = comp(f"Choose #{n}:", extra_body={"structured_outputs": {"choice": values}}, temperature=temp)
                return "valid" if c.text in values and c.finish_reason == "stop" else f"invalid choice: {c.text!r}"
            if kind == "backend_artifact":
                fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": {"x-triec-artifact": "colors"}}}
                c = chat(f"Pick a color #{n}", response_format=fmt, temperature=temp)
                ok = c.message.content in sets["colors"] and c.finish_reason == "stop"
                return "valid" if ok else f"invalid backend artifact: {c.message.content!r}"
            if kind == "tools":
                c = chat(
                    f"Call a tool #{n}",
                    max_tokens=80,
                    tools=TOOLS,
                    tool_choice="required",
                    parallel_tool_calls=False,
                    temperature=temp,
                )
                calls = c.message.tool_calls or []
                if c.finish_reason != "tool_calls" or len(calls) != 1:
                    return f"invalid tools: {c.finish_reason} {len(calls)} calls {c.message.content!r:.80}"
                name = calls[0].function.name
                try:
                    jsonschema.validate(json.loads(calls[0].function.arguments), by_tool[name])
                except (KeyError, ValueError, jsonschema.ValidationError) as exc:
                    return f"invalid tools: {name} {calls[0].function.arguments!r:.80} ({type(exc).__name__})"
                return "valid"
            if kind == "delegated":
                c = comp(f"Code #{n}:", extra_body={"structured_outputs": {"regex": REGEX}}, temperature=temp)
                return "valid" if re.fullmatch(REGEX, c.text) else f"invalid regex: {c.text!r}"
            if kind == "free":
                comp(f"Free #{n}:", max_tokens=8, temperature=temp)
                return "valid"
            if kind in ("fault_xargs", "fault_backend"):
                try:
                    if kind == "fault_xargs":
                        c = comp(f"Word #{n}:", extra_body={"vllm_xargs": {"triec": "flip"}}, temperature=temp)
                        text = c.text
                    else:
                        fmt = {
                            "type": "json_schema",
                            "json_schema": {"name": "f", "schema": {"x-triec-artifact": "flip"}},
                        }
                        c = chat(f"Word #{n}", response_format=fmt, temperature=temp)
                        text = c.message.content or ""
                except openai.BadRequestError as exc:
                    return "refused (fault)" if FAULT_MESSAGES.search(str(exc)) else f"failed: 400 {exc}"
                except openai.InternalServerError as exc:
                    return f"ended (HTTP {exc.status_code})"
                if text in sets["flip"] and c.finish_reason == "stop":
                    return "valid"
                if text == "" or c.finish_reason not in ("stop", "length"):
                    return f"ended ({c.finish_reason}, {text!r:.20})"
                return f"invalid flip: {text!r} ({c.finish_reason})"
            label, endpoint, body = rng.choice(hostile)
            try:
                if endpoint == "c":
                    body = dict(body)
                    prompt = body.pop("prompt", "x")
                    comp(prompt, max_tokens=4, **body)
                else:
                    chat("x", **body)
            except openai.BadRequestError:
                return "400"
            except openai.APIStatusError as exc:
                with lock:
                    hostile_bad.append(f"{label}: HTTP {exc.status_code}")
                return f"failed hostile {label}: HTTP {exc.status_code}"
            with lock:
                hostile_bad.append(f"{label}: served")
            return f"failed hostile {label}: served"

        t0 = time.monotonic()
        end_at = t0 + args.duration

        def worker(w: int) -> None:
            rng = random.Random(args.seed * 1000 + w)
            while not stop.is_set() and time.monotonic() < end_at:
                with lock:
                    if args.max_requests and count[0] >= args.max_requests:
                        return
                    count[0] += 1
                kind = rng.choices(kinds, weights)[0]
                t = time.perf_counter()
                try:
                    outcome = one(kind, rng)
                except openai.APIConnectionError as exc:  # the cause says which: refused, reset, closed idle...
                    cause = exc.__cause__
                    dt = time.perf_counter() - t
                    outcome = f"failed: connection ({exc} {type(cause).__name__}: {cause}) after {dt:.1f} s"
                except openai.APIError as exc:
                    outcome = f"failed: {type(exc).__name__} {str(exc)[:200]}"
                dt = time.perf_counter() - t
                with lock:
                    lat[kind].append(dt)
                    outcomes[kind][outcome if len(outcome) < 60 else outcome[:60]] += 1
                    if outcome.startswith(("invalid", "failed")):
                        failures.append(f"{kind}: {outcome}")

        faults = Faults(art, blobs, fault_every, stop)
        rss_warm = None
        series: list[tuple[float, dict[str, int]]] = []  # (seconds, MiB per process) every ~15 s
        with ThreadPoolExecutor(args.clients) as pool:
            futures = [pool.submit(worker, w) for w in range(args.clients)]
            faults.start()
            while not all(f.done() for f in futures):
                time.sleep(0.5)
                if time.monotonic() - t0 >= 15 * len(series):
                    per: dict[str, int] = {}
                    tree_rss(proc.pid, per)
                    series.append((round(time.monotonic() - t0), per))
                if rss_warm is None and time.monotonic() - t0 >= warmup:
                    rss_warm, _ = tree_rss(proc.pid)
                    print(
                        f"after warm-up ({sum(map(len, lat.values()))} requests): RSS {rss_warm / 2**20:.0f} MiB",
                        flush=True,
                    )
                if proc.poll() is not None:
                    stop.set()
            for f in futures:
                f.result()
        stop.set()
        faults.join(timeout=10)
        elapsed = time.monotonic() - t0
        per_end: dict[str, int] = {}
        rss_end, pids_end = tree_rss(proc.pid, per_end)
        series.append((round(elapsed), per_end))
        if rss_warm is None:
            rss_warm = rss_end
        import urllib.request

        try:
            healthy = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30).status == 200
        except OSError:
            healthy = False
        died = sorted(pids_start - pids_end)
        if proc.poll() is not None:
            failures.append(f"server exited with {proc.returncode}")
        if died:
            failures.append(f"server processes died: {died}")
        if not healthy:
            failures.append("/health did not answer 200 at the end")
        log.flush()
        if log_path.read_text(errors="replace").count("triec vLLM backend on") < 2:  # frontend and engine at least
            failures.append("the triec backend did not switch on (TRIEC_VLLM_BACKEND, the plugin's entry point)")
        if faults.error is not None:
            failures.append(f"fault thread: {faults.error!r}")
        growth_mb = (rss_end - rss_warm) / 2**20
        if growth_mb > bound_mb:
            failures.append(f"RSS grew {growth_mb:.0f} MiB after warm-up, above the {bound_mb:.0f} MiB bound")
        for kind in kinds:
            if not lat.get(kind):
                failures.append(f"no {kind} request was sent")

        def pct(xs: list[float], q: float) -> float:
            s = sorted(xs)
            return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")

        total = sum(len(v) for v in lat.values())
        print(f"\n{total} requests in {elapsed:.0f} s ({total / elapsed:.1f} req/s), {args.clients} clients")
        print(f"{'kind':<18}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}  outcomes")
        for kind in kinds:
            xs = lat.get(kind, [])
            oc = ", ".join(f"{k} {v}" for k, v in outcomes[kind].most_common())
            print(f"{kind:<18}{len(xs):>6}{pct(xs, 0.5) * 1e3:>9.0f}{pct(xs, 0.99) * 1e3:>9.0f}  {oc}")
        invalid = sum(v for o in outcomes.values() for k, v in o.items() if k.startswith("invalid"))
        print(f"faults injected: {dict(faults.done)}")
        print(
            f"hostile answered 400: {outcomes['hostile']['400']} of {len(lat.get('hostile', []))} "
            f"(not 400: {len(hostile_bad)})"
        )
        print(f"invalid constrained outputs: {invalid}")
        print(f"engine processes died: {len(died)}; server alive: {proc.poll() is None}; /health: {healthy}")
        print(
            "RSS MiB per process over time: "
            + "; ".join(
                f"{t}s " + " ".join(f"{k}={v}" for k, v in sorted(per.items()))
                for t, per in series[:: max(1, len(series) // 8)]
            )
        )
        print(
            f"RSS (server tree): start {rss_start / 2**20:.0f} MiB, after warm-up {rss_warm / 2**20:.0f} MiB, "
            f"end {rss_end / 2**20:.0f} MiB; growth after warm-up {growth_mb:+.0f} MiB (bound {bound_mb:.0f})"
        )
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "requests": total,
                        "seconds": elapsed,
                        "clients": args.clients,
                        "startup_s": startup_s,
                        "kinds": {
                            k: {
                                "n": len(lat.get(k, [])),
                                "p50_ms": pct(lat.get(k, []), 0.5) * 1e3,
                                "p99_ms": pct(lat.get(k, []), 0.99) * 1e3,
                                "outcomes": dict(outcomes[k]),
                            }
                            for k in kinds
                        },
                        "faults": dict(faults.done),
                        "hostile_not_400": hostile_bad,
                        "invalid": invalid,
                        "died": died,
                        "rss_mb": {"start": rss_start / 2**20, "warm": rss_warm / 2**20, "end": rss_end / 2**20},
                        "rss_bound_mb": bound_mb,
                        "rss_series": series,
                        "failures": failures,
                    },
                    indent=1,
                )
            )
    finally:
        stop_group(proc)
        log.close()
    if failures:
        print(f"\nFAILED ({len(failures)}): server log {log_path}", file=sys.stderr)
        for f in failures[:30]:
            print("  " + f, file=sys.stderr)
        return 1
    print("\nOK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
