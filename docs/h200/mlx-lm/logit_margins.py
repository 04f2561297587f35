"""How far the patched small Llama's logits sit from the float64-attention model's, and how far two
broken attentions would put them: the margins behind tests/parity/test_mlx_lm_models.py's TOLERANCE.

    PYTHONPATH=. python docs/h200/mlx-lm/logit_margins.py BACKEND [BACKEND ...]

Each line: the largest logit error over the largest logit, for 250 cached keys and 12 decode
steps; 30 keys, a 12-token prompt and 3 steps; and (4-bit) 2046 keys and 5 steps.
"""

import sys

import mlx.core as mx
import numpy as np
import pytest

import fusedattend.mlx_lm_attention as integration
import tests.parity.test_mlx_lm_models as t

real = {name: getattr(integration, name) for name in ("decode_attention", "quantized_decode_attention")}


def drop_newest_key(name):
    def call(q, k, v, **kwargs):
        cut = (lambda x: tuple(a[..., :-1, :] for a in x)) if isinstance(k, (tuple, list)) else (lambda x: x[..., :-1, :])
        return real[name](q, cut(k), cut(v), **kwargs)
    return call


def interleaved_heads(name):
    def call(q, k, v, **kwargs):
        H_q, H_kv = q.shape[1], (k[0] if isinstance(k, (tuple, list)) else k).shape[1]
        ratio = H_q // H_kv
        perm = [(h % H_kv) * ratio + h // H_kv for h in range(H_q)]
        out = real[name](q[:, mx.array(perm)], k, v, **kwargs)
        return out[:, mx.array(np.argsort(perm))]
    return call


def relative_error(dtype, quantized, backend, S0, steps, **kwargs):
    got, expected = t.patched_against_oracle(t.small_llama(dtype), quantized, S0, steps, backend,
                                             pytest.MonkeyPatch(), **kwargs)
    return float(np.abs(got - expected).max() / np.abs(expected).max())


for backend in sys.argv[1:]:
    for variant, wrap in (("shipped", None), ("newest key dropped", drop_newest_key),
                          ("heads interleaved", interleaved_heads)):
        for name in real:
            setattr(integration, name, wrap(name) if wrap else real[name])
        for dtype in (mx.float32, mx.bfloat16):
            for quantized in (False, True):
                errs = [relative_error(dtype, quantized, backend, 250, 12),
                        relative_error(dtype, quantized, backend, 30, 4, seed=4, prompt=12)]
                if quantized:
                    errs.append(relative_error(dtype, True, backend, 2046, 5))
                print(f"{backend:9s} {variant:18s} {str(dtype):20s} {'4-bit' if quantized else 'plain'}: "
                      + " ".join(f"{e:.3g}" for e in errs), flush=True)
