"""fusedattend: fused decode-attention kernels for MLX (Metal, CUDA, CPU).

    import fusedattend as fa
    out = fa.decode_attention(q, k, v, mask="causal")
"""

try:
    import mlx.core  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on how MLX was installed
    raise ImportError(
        "fusedattend needs MLX with a backend, and importing mlx.core failed "
        f"({err}). On Linux `pip install mlx` alone has no backend: from a clone of fusedattend, "
        "install `pip install -e '.[cpu]'` (MLX's CPU build, mlx[cpu]) or "
        "`pip install -e '.[cuda]'` (NVIDIA GPUs, mlx[cuda13]); on macOS `pip install mlx`."
    ) from err

from ._problem import QuantizedKV
from .api import decode_attention, dequantize_kv, quantize_kv, quantized_decode_attention
from .backends import BACKENDS, available_backends, default_backend
from .key_ranges import KeyRanges
from .mlx_lm_attention import patch_mlx_lm
from .window_attention import windowed_decode_attention
from .mlx_lm_cache import make_prompt_cache
from .window_cache import QuantizedWindowCache

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "KeyRanges",
    "QuantizedKV",
    "QuantizedWindowCache",
    "available_backends",
    "decode_attention",
    "default_backend",
    "dequantize_kv",
    "make_prompt_cache",
    "patch_mlx_lm",
    "quantize_kv",
    "quantized_decode_attention",
    "windowed_decode_attention",
]
