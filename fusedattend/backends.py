"""Which backends exist here, and which one a call goes to.

A backend is a module with `decode_attention(problem)` and `quantized_decode_attention(problem)`
(see `fusedattend._problem.Problem`). "reference" is always there; "cpu" needs numpy; "metal" and
"cuda" need MLX's GPU backend of that name. backend=None picks the fastest for where the arrays
live (the default device); FUSEDATTEND_BACKEND overrides that choice.
"""

from __future__ import annotations

import functools
import importlib
import os

import mlx.core as mx

from ._problem import MAX_FUSED_QUERY_LEN, Problem

BACKENDS = ("reference", "cpu", "metal", "cuda")
ENV_VAR = "FUSEDATTEND_BACKEND"

_MODULES = {"reference": "reference", "cpu": "cpu", "metal": "gpu", "cuda": "gpu"}

# Below this many K/V elements per request and layer (H_kv * S * D) the cpu backend's fixed cost
# (about 140-230 us of numpy calls) loses to the reference path (measured: docs/decisions/cpu-backend-crossover.md). The
# choice must not look at B or NL: a batched call and the per-request calls have to take the same
# path, or batch invariance breaks.
CPU_MIN_KV_ELEMENTS = 1 << 17


@functools.lru_cache(maxsize=None)  # fixed for the process; looking costs 2-3 us a call
def _is_available(name: str) -> bool:
    if name == "reference":
        return True
    if name == "cpu":
        return importlib.util.find_spec("numpy") is not None and _module("cpu") is not None
    if name == "metal":
        return mx.metal.is_available() and _module("gpu") is not None
    if name == "cuda":
        return hasattr(mx, "cuda") and mx.cuda.is_available() and _module("gpu") is not None
    return False


@functools.lru_cache(maxsize=None)  # import_module costs about 2 us a call even when loaded
def _module(modname: str):
    try:
        return importlib.import_module(f"fusedattend.{modname}")
    except ImportError:
        return None


def available_backends() -> list[str]:
    """Names of the backends usable in this process, fastest-first is not implied."""
    return [name for name in BACKENDS if _is_available(name)]


def _check_name(name, source):
    if not isinstance(name, str):
        raise TypeError(f"{source} must be a backend name (str) or None, got {type(name).__name__}")
    if name not in BACKENDS:
        raise ValueError(f"{source}={name!r} is not a backend; known backends: {', '.join(BACKENDS)}")
    if not _is_available(name):
        raise ValueError(
            f"{source}={name!r} is not available here; available: {', '.join(available_backends())}"
        )
    return name


def default_backend() -> str:
    """The backend a call with backend=None uses for arrays on the default device."""
    env = os.environ.get(ENV_VAR)
    if env:
        return _check_name(env, ENV_VAR)
    if mx.default_device() == mx.gpu:
        for name in ("metal", "cuda"):
            if _is_available(name):
                return name
        return "reference"
    return "cpu" if _is_available("cpu") else "reference"


def resolve(backend) -> str:
    return default_backend() if backend is None else _check_name(backend, "backend")


# Replays: for a call whose signature (_problem.call_signature) passed the checks on a backend
# that can replay it (the GPU backends: `replayer`), the function that launches its kernels from
# its arrays alone. A decode loop repeats one signature every step (its cache growing a key a
# step: S is not in the signature); its later steps skip the checks, the dispatch and the launch
# set-up (tens of µs of host time). Keyed by what picks the backend too, and by
# FUSEDATTEND_SCHEDULE's value, which fixes the GPU schedule's Policy (gpu/schedule.py reads each
# file once a process): a replayer made under another policy is never returned.
_REPLAYS = {}
_REPLAYS_MAX = 4096


SCHEDULE_ENV = "FUSEDATTEND_SCHEDULE"  # gpu.schedule.SCHEDULE_ENV (not imported: backends stays GPU-free)
POLICY_DIR_ENV = "FUSEDATTEND_POLICY_DIR"  # gpu.schedule.POLICY_DIR_ENV: where chips' tuned policies are


def _replay_key(signature, backend):
    policy = os.environ.get(SCHEDULE_ENV), os.environ.get(POLICY_DIR_ENV)
    if backend is None:  # what default_backend() reads
        return signature, None, policy, os.environ.get(ENV_VAR), mx.default_device() == mx.gpu
    return signature, backend, policy


def replay(signature, backend):
    """The replayer of an earlier call with this signature and backend argument, or None."""
    if signature is None:
        return None
    try:
        return _REPLAYS.get(_replay_key(signature, backend))
    except TypeError:  # an unhashable scale, bits, backend, ...: the checks will name it
        return None


def replay_key(backend):
    """What picks the backend and the GPU schedule for a call with this `backend` argument: part
    of the key of anything set up for such calls (QuantizedWindowCache's plans)."""
    return _replay_key(None, backend)


# Other modules' set-ups that hold kernel objects (window_gpu's launchers, QuantizedWindowCache's
# plans): forget_replays clears them too.
_FORGETTERS = []


def forget_when_replays_are(clear):
    """Call `clear` whenever forget_replays runs."""
    _FORGETTERS.append(clear)


def forget_replays():
    """Forget every set-up holding kernel objects (the replays, and _FORGETTERS')."""
    _REPLAYS.clear()
    for clear in _FORGETTERS:
        clear()


def run(problem: Problem, backend, quantized: bool, signature=None):
    """Run `problem` on the named backend; L beyond the fused kernels goes to the reference.

    signature: the call's _problem.call_signature, or None; a backend with a `replayer` then
    keeps the call's replayer for `replay` (its launcher for any S)."""
    name = resolve(backend)
    if problem.q.shape[-2] > MAX_FUSED_QUERY_LEN:  # L
        name = "reference"
    elif backend is None and name == "cpu" and not os.environ.get(ENV_VAR):
        NL, B, H_q, H_kv, L, S, D = problem.shape
        if H_kv * S * D < CPU_MIN_KV_ELEMENTS:
            name = "reference"
    module = _module(_MODULES[name])
    launcher = getattr(module, "launcher" if signature is None else "replayer", None)
    launch = launcher(problem, quantized=quantized) if launcher else None
    if launch is None:
        fn = module.quantized_decode_attention if quantized else module.decode_attention
        return problem.unlayer(fn(problem))
    if signature is not None:
        if len(_REPLAYS) >= _REPLAYS_MAX:
            _REPLAYS.clear()
        _REPLAYS[_replay_key(signature, backend)] = launch
    return launch(*problem.arrays)
