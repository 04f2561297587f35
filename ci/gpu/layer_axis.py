"""Layer axis: NL=36 layers in one 5-D call vs 36 per-layer calls (and 36 mx.fast.sdpa calls), bf16, B=1, S=2048.

    python ci/gpu/layer_axis.py      # on a machine with a GPU backend; writes $OUT/layers.json if OUT is set
"""
import json, os, time
import mlx.core as mx
import fusedattend as fa
from fusedattend.bench import time_call
NL, B, S = 36, 1, 2048
q = mx.random.normal((NL, B, 32, 1, 128)).astype(mx.bfloat16)
k = mx.random.normal((NL, B, 8, S, 128)).astype(mx.bfloat16)
v = mx.random.normal((NL, B, 8, S, 128)).astype(mx.bfloat16)
mx.eval(q, k, v)
one = min(time_call(lambda: fa.decode_attention(q, k, v, backend="cuda"), repeats=10, inner=5))
per = min(time_call(lambda: [fa.decode_attention(q[i], k[i], v[i], backend="cuda") for i in range(NL)], repeats=10, inner=5))
sdpa = min(time_call(lambda: [mx.fast.scaled_dot_product_attention(q[i], k[i], v[i], scale=128 ** -0.5) for i in range(NL)], repeats=10, inner=5))
r = dict(NL=NL, B=B, S=S, one_call_us=one * 1e6, per_layer_calls_us=per * 1e6, ratio=per / one, mlx_sdpa_36_calls_us=sdpa * 1e6)
print(json.dumps(r)); json.dump(r, open(os.path.join(os.environ.get("OUT", "."), "layers.json"), "w"))
