"""Fault injection for tests: kill real processes (a Ray worker, a driver's process group) at a
chosen moment, so resume paths are tested against what actually happens, not a simulation."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = ["Driver", "kill_matching", "wait_for", "when"]


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.05) -> bool:
    """Poll until predicate() is true; False when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return False


def kill_matching(pattern: str, sig: int = signal.SIGKILL, limit: int = 1,
                  root: int | None = None) -> list[int]:
    """Send `sig` to up to `limit` descendants of process `root` (default: this one, so an
    in-process Ray's workers, never another session's) whose command line holds `pattern`."""
    killed = []
    for proc in psutil.Process(root or os.getpid()).children(recursive=True):
        try:
            if pattern in " ".join(proc.cmdline()):
                proc.send_signal(sig)
                killed.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if len(killed) >= limit:
            break
    return killed


def kill_once_running(pattern: str, timeout: float = 60.0) -> list[int]:
    """kill_matching(pattern), tried until a process matches or `timeout` passes: a Ray task's
    worker holds the task's name in its command line only while it runs the task (between
    tasks it reads ray::IDLE)."""
    killed: list[int] = []
    wait_for(lambda: bool(killed.extend(kill_matching(pattern)) or killed), timeout)
    return killed


def when(predicate: Callable[[], bool], action: Callable[[], object],
         timeout: float = 300.0) -> threading.Thread:
    """In a background thread: wait for predicate, then run action once (its result is kept
    on the thread as .result; None when the predicate never came true)."""
    def run() -> None:
        thread.result = action() if wait_for(predicate, timeout) else None

    thread = threading.Thread(target=run, daemon=True)
    thread.result = None
    thread.start()
    return thread


class Driver:
    """A Python driver script in its own process group (as a user's terminal would run it),
    that can be SIGKILLed whole, children included."""

    def __init__(self, code: str, env: dict[str, str] | None = None, log: Path | None = None):
        self.log = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-c", code],
                                     env={**os.environ, **(env or {})}, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole process group, and reap the driver."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.log is not subprocess.DEVNULL:
            self.log.close()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        if self.log is not subprocess.DEVNULL:
            self.log.close()
        return code
