"""The cpu backend's threads: one level of parallelism, our workers, each running BLAS on one thread.

Units run on a pool of one worker per core. A BLAS that threads each product itself would put
cores x cores runnable threads on the machine, and with another process on the cores that
collapsed (docs/decisions/cpu-one-level-of-threads.md). So while a call runs, BLAS is held
single-threaded, by the means each library offers:

* OpenBLAS, MKL, BLIS, FlexiBLAS (what numpy links on Linux and Windows, and OpenBLAS on macOS
  before numpy 2 / macOS 14): threadpoolctl. Their thread counts are process-wide, so the limit
  is set when the first of concurrent calls starts and restored when the last one ends (numpy
  products of other threads run single-threaded during that window).
* Apple Accelerate (numpy >= 2 on macOS >= 14), which threadpoolctl does not control
  (joblib/threadpoolctl#136): BLASSetThreading(BLAS_THREADING_SINGLE_THREADED), macOS 15+, a
  per-thread setting: set once in each worker, and around a call on the caller's thread.
* Neither (Accelerate of macOS 14, an unknown BLAS): BLAS keeps the cores and the units run one
  at a time on the caller's thread, unless VECLIB_MAXIMUM_THREADS=1 (set before numpy loads) or
  THREADS_ENV asks for workers.

The worker count never changes results: every unit's arithmetic is the same on any thread, and
partials are merged in unit order (tests/unit/test_cpu_backend.py checks 1, 2 and the default).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

THREADS_ENV = "FUSEDATTEND_CPU_THREADS"  # worker count; unset: the cores this process may use, <= 8
MAX_THREADS = 8  # beyond this the units of a decode step (S / KEY_BLOCK per request) run out
_ACCELERATE_SINGLE = 1  # BLAS_THREADING_SINGLE_THREADED in vecLib's thread_api.h


def threads() -> int:
    """Workers for a call: THREADS_ENV if set, else the cores this process may run on (at most
    MAX_THREADS), or 1 where BLAS cannot be held to one thread (then BLAS owns the cores)."""
    raw = os.environ.get(THREADS_ENV)
    if raw is not None and raw.strip():
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}")
        return n
    if not _blas().can_limit:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


class _Blas:
    """How numpy's BLAS is held to one thread here. Resolved once, at the first call."""

    def __init__(self):
        self.controller = self.accelerate = None
        try:
            from threadpoolctl import ThreadpoolController

            controller = ThreadpoolController().select(user_api="blas")
            self.controller = controller if len(controller) else None
        except ImportError:
            pass
        if self.controller is None and sys.platform == "darwin":
            self.accelerate = _accelerate_setter()
        veclib_one = os.environ.get("VECLIB_MAXIMUM_THREADS", "").strip() == "1"
        self.can_limit = bool(self.controller or self.accelerate or veclib_one)
        self.users = 0
        self.limiter = None
        self.lock = threading.Lock()


def _accelerate_setter():
    """Accelerate's (BLASSetThreading, BLASGetThreading), macOS 15+, or None."""
    try:
        lib = ctypes.CDLL("/System/Library/Frameworks/Accelerate.framework/Accelerate")
        set_, get = lib.BLASSetThreading, lib.BLASGetThreading
    except (OSError, AttributeError):
        return None
    set_.argtypes, set_.restype, get.restype = [ctypes.c_int], ctypes.c_int, ctypes.c_int
    return set_, get


_blas_state = None
_blas_lock = threading.Lock()
_pools = {}
_pool_lock = threading.Lock()


def _blas() -> _Blas:
    global _blas_state
    with _blas_lock:
        if _blas_state is None:
            _blas_state = _Blas()
        return _blas_state


@contextlib.contextmanager
def single_threaded_blas():
    """BLAS at one thread, for the calling thread and the workers, while the block runs."""
    blas = _blas()
    if blas.controller is not None:
        with blas.lock:
            if blas.users == 0:
                blas.limiter = blas.controller.limit(limits=1, user_api="blas")
            blas.users += 1
    before = None
    if blas.accelerate is not None:
        before = blas.accelerate[1]()
        blas.accelerate[0](_ACCELERATE_SINGLE)
    try:
        yield
    finally:
        if before is not None:
            blas.accelerate[0](before)
        if blas.controller is not None:
            with blas.lock:
                blas.users -= 1
                if blas.users == 0:
                    blas.limiter.restore_original_limits()
                    blas.limiter = None


def _worker_init():
    blas = _blas()
    if blas.accelerate is not None:
        blas.accelerate[0](_ACCELERATE_SINGLE)


def _executor(workers: int) -> ThreadPoolExecutor:
    """The pool of `workers` threads. One per count asked for (THREADS_ENV changed between
    calls), kept: a concurrent call may still be submitting to the other one."""
    with _pool_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="fusedattend-cpu", initializer=_worker_init
            )
        return pool


def ordered(fn, items, workers):
    """fn over items on `workers` pool threads, results yielded in item order, a bounded number
    in flight (memory stays bounded at any S)."""
    if len(items) <= 1 or workers == 1:
        for item in items:
            yield fn(item)
        return
    pool = _executor(workers)
    window = 2 * workers + 2
    pending = []
    it = iter(items)
    for item in it:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            break
    while pending:
        result = pending.pop(0).result()
        nxt = next(it, None)
        if nxt is not None:
            pending.append(pool.submit(fn, nxt))
        yield result
