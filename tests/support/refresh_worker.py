"""A long-lived refresh worker: one Spark driver in its own process, refreshing the specs it is sent, so a
test can race refreshes from two drivers many times without starting two JVMs per race.

The parent writes one JSON command per line to the worker's stdin and reads its answers, one JSON line
each after ``WORKER ``, from its stdout (anything else there is the driver's own output):

* ``{"spec": {...}, "hold_at": "committing"}``: refresh ``spec``; when the refresh reaches the phase
  ``hold_at`` (``engine.core.trace``), answer ``{"at": phase}`` and wait for a line (any) before going on.
  Then answer ``{"result": {...}}`` or ``{"error": "ConcurrentRefreshError", "message": ...}``.
* ``{"quit": true}`` (or end of input): stop.

The worker's driver is configured by its environment like ``fkjoin run``'s (``FKJOIN_SPARK_MASTER``,
``FKJOIN_SPARK_CONF``...). :class:`RefreshWorker` is the parent's side::

    with RefreshWorker(env, log) as worker:
        worker.send({"spec": spec, "hold_at": "committing"})
        worker.receive()    # {"at": "committing"}: this refresh waits there
        worker.send({})     # go on
        worker.receive()    # {"result": {...}} or {"error": ...}
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

MARKER = "WORKER "
TESTS = Path(__file__).resolve().parents[1]


def _answer(out: TextIO, message: Mapping[str, Any]) -> None:
    out.write(MARKER + json.dumps(message, default=str) + "\n")
    out.flush()


def _holder(at: str | None, commands: TextIO, out: TextIO) -> Callable[[str], None]:
    """A phase listener that, the first time the refresh reaches ``at``, says so and waits for a line."""
    held: list[str] = []

    def hold(name: str) -> None:
        if name == at and not held:
            held.append(name)
            _answer(out, {"at": name})
            commands.readline()

    return hold


def serve(commands: TextIO, out: TextIO) -> None:
    """Run refreshes as :data:`commands` asks, answering on ``out`` (the worker's main loop)."""
    from airflow_provider_fkjoin.engine import get_spark, run_spec
    from airflow_provider_fkjoin.engine.core.trace import phase_listener

    spark = get_spark()
    _answer(out, {"ready": True})
    while line := commands.readline():
        command = json.loads(line)
        if command.get("quit"):
            break
        hold = _holder(command.get("hold_at"), commands, out)
        try:
            with phase_listener(hold):
                result = run_spec(command["spec"], spark=spark)
        except Exception as error:
            _answer(out, {"error": type(error).__name__, "message": str(error)[-3000:]})
        else:
            _answer(out, {"result": result})


class RefreshWorker:
    """The parent's side of a worker process (started by the constructor, stopped by :meth:`close`)."""

    def __init__(self, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._log = log.open("w")
        path = os.pathsep.join(p for p in (str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "support.refresh_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**env, "PYTHONPATH": path},
            text=True,
            start_new_session=True,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.receive()
        assert ready == {"ready": True}, ready

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARKER):
                self._answers.put(json.loads(line[len(MARKER) :]))
        self._answers.put(None)

    def send(self, command: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def receive(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """The worker's next answer (``timeout_s`` only bounds a hung worker; it is no synchronisation)."""
        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            answer = None
        if answer is None:
            self._log.flush()
            tail = self.log.read_text()[-4000:]
            raise AssertionError(f"refresh worker ended or hung (exit {self.process.poll()}):\n{tail}")
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send({"quit": True})
                self.process.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> RefreshWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
