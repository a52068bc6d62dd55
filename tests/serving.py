"""Starting and stopping a local vLLM OpenAI-compatible server: shared by the server tests and scripts/soak.py.

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
import time

STARTUP_S = 300
SERVER_ENV = {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen) -> None:
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
