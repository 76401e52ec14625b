"""Helpers for end-to-end tests: real server processes on 127.0.0.1, polled readiness, HTTP JSON.

Every process is started from an argv list in its own session (process group), logs to a file in the
test's tmp folder, and is stopped by its PID's group at teardown (SIGTERM, then SIGKILL after a grace
period). Readiness is a condition polled with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ARTIFACTS = REPO / "test-artifacts"

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """One long-running process started from an argv list, in its own process group."""

    name: str
    argv: Sequence[str]
    log: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Service:
        """Start the process; its stdout and stderr go to ``self.log``."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_running(self) -> None:
        """Fail with the log's tail if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with code {self.proc.returncode}; log tail:\n{self.tail()}"
            )

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group (the process and its children), SIGKILL what is left after grace."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the process leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        # children that outlived their leader (e.g. task runners) are in the same group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    services: Sequence[Service] = (),
    interval_s: float = 0.5,
) -> T:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout_s``.

    A service in ``services`` that exits meanwhile fails the wait at once, with its log's tail.
    Exceptions from ``check`` count as "not yet" (the last one is reported on timeout).
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        for service in services:
            service.check_running()
        try:
            value = check()
            if value:
                return value
        except Exception as error:
            last_error = error
        if time.monotonic() >= deadline:
            logs = "\n".join(f"--- {s.name} ({s.log}):\n{s.tail(15)}" for s in services)
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {what}; last error: {last_error!r}\n{logs}"
            )
        time.sleep(interval_s)  # poll interval, not synchronisation: the condition decides


def http_json(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 15.0,
) -> Any:
    """A JSON request with the standard library; raises ``urllib.error.HTTPError`` on 4xx/5xx."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        payload = response.read()
    return json.loads(payload) if payload else None


def http_error_body(error: urllib.error.HTTPError) -> str:
    """The body of an HTTP error response, for assertion messages."""
    try:
        return error.read().decode(errors="replace")[:2000]
    except Exception:
        return ""
