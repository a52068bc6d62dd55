"""Starting and stopping a local vLLM OpenAI-compatible server: shared by the server tests and tools/soak.py.

``TOOLS`` are the two tools they call with ``tool_choice="required"``: closed
argument schemas of enums and a boolean, so even a random model's calls end.

``SERVER_ENV`` raises the server's HTTP keep-alive above the client's. vLLM's
uvicorn closes a connection idle for ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (5 s) and
the openai client's pool reuses one idle up to its ``keepalive_expiry`` (also
5 s), so a request sent on a connection in its fifth idle second can meet a
socket the server is closing: the client reports "Connection error." and the
server logs nothing (once in CI's quick soak, 1 of 791 requests). With the
server at 60 s the client always drops a connection first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from triec.errors import ServerDidNotStart

STARTUP_S = 300
SERVER_ENV = {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_alert",
            "parameters": {
                "type": "object",
                "properties": {"level": {"type": "string", "enum": ["low", "high"]}, "repeat": {"type": "boolean"}},
                "required": ["level", "repeat"],
                "additionalProperties": False,
            },
        },
    },
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(client: Any, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = STARTUP_S) -> None:
    """Poll ``/v1/models`` through the openai ``client`` until the server answers (ServerDidNotStart otherwise)."""
    import openai

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServerDidNotStart(f"server exited with {proc.returncode}: {log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise ServerDidNotStart(f"server not ready after {timeout_s:.0f} s: {log_path.read_text()[-3000:]}")
        try:
            client.models.list()
            return
        except openai.APIConnectionError:
            time.sleep(1)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole process group, SIGKILL after 30 s."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)  # still someone in the group?
            except ProcessLookupError:
                proc.wait(timeout=5)
                return
            proc.poll()  # reap the leader: a zombie still counts as a member of the group
            time.sleep(0.5)


@contextmanager
def openai_server(
    args: list[str], env: dict[str, str], log_path: Path, timeout_s: float
) -> Iterator[tuple[Any, subprocess.Popen[bytes]]]:
    """vLLM's OpenAI server with ``args`` on a free local port, its output in ``log_path``, in its own process group.

    Yields (openai client with ``timeout_s`` per request, the process) once the server answers; stops the whole
    group on exit. ``env`` is the server's whole environment.
    """
    import openai

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *args,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=timeout_s, max_retries=0
            )
            wait_ready(client, proc, log_path)
            yield client, proc
        finally:
            stop_group(proc)
