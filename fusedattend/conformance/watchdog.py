"""A bound on how long one kernel call may take, so that a hung kernel ends the run with one line.

    with watchdog.bounded(120.0, "Spec(B=1, ...)"):
        out = fn(...); mx.eval(out)

One daemon thread waits on the nearest deadline; past it, the line goes to stderr and the process
exits with status 3 (pytest's "internal error", which no property outcome uses). Exiting is the
only way out: a kernel stuck in a GPU wait or a loop cannot be interrupted from Python, and
waiting for it is the hang the plugin promises not to have. A kernel that holds the GIL while it
spins never lets this thread run; that case is left to pytest-timeout, if the user has it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

EXIT_STATUS = 3

_lock = threading.Lock()
_wake = threading.Event()
_armed = None  # (deadline, seconds, what) of the call in flight, or None
_thread = None
release_output = None  # set by the plugin: hands stdout/stderr back from pytest's capture before the line


def _watch():
    while True:
        with _lock:
            armed = _armed
        if armed is None:
            _wake.wait()
            _wake.clear()
            continue
        deadline, seconds, what = armed
        left = deadline - time.monotonic()
        if left > 0:
            _wake.wait(left)
            _wake.clear()
            continue
        if release_output is not None:
            release_output()
        sys.stderr.write(f"\nfusedattend conformance: the kernel did not return within {seconds:g} s on {what} "
                         f"(a hang?); stopping. --fa-timeout sets the bound.\n")
        sys.stderr.flush()
        os._exit(EXIT_STATUS)


@contextmanager
def bounded(seconds, what):
    """Runs the body; exits the process if it takes longer than `seconds` (None or 0: no bound)."""
    global _armed, _thread
    if not seconds:
        yield
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_watch, name="fa-conformance-watchdog", daemon=True)
            _thread.start()
        _armed = (time.monotonic() + seconds, seconds, what)
    _wake.set()
    try:
        yield
    finally:
        with _lock:
            _armed = None
