"""fusedattend.make_prompt_cache: a QuantizedWindowCache for every layer of an mlx_lm model, and
the registration mlx_lm's load_prompt_cache needs to find the class."""

from __future__ import annotations

from ._problem import check_bits
from .window_cache import DEFAULT_WINDOW, QuantizedWindowCache, _check_window


def make_prompt_cache(model, *, bits=4, group_size=64, window=DEFAULT_WINDOW):
    """A QuantizedWindowCache for every layer of an mlx_lm model: the list mlx_lm's generate,
    stream_generate, generate_step and BatchGenerator.insert(..., caches=[...]) take.

    ValueError naming the argument where it cannot work: bits or group_size the kernels do not
    take, a window under one token, a group size that does not divide the heads, or a model
    whose layers are not all plain KV attention (sliding windows, recurrent state, MLA)."""
    check_bits(bits, group_size)
    _check_window(window)
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"model must be an mlx_lm model with .layers, got {type(model).__name__}")
    if hasattr(model, "make_cache"):
        for i, own in enumerate(model.make_cache()):
            if type(own).__name__ != "KVCache":
                raise ValueError(f"model: layer {i} takes mlx_lm's {type(own).__name__} (sliding-window, recurrent "
                                 "or other attention), which QuantizedWindowCache cannot serve")
    for i, layer in enumerate(layers):
        attn = getattr(layer, "self_attn", None)
        head_dim = getattr(attn, "head_dim", None)
        if isinstance(head_dim, int) and head_dim % group_size:
            raise ValueError(f"group_size={group_size} does not divide layer {i}'s head dimension {head_dim}")
        if attn is not None and hasattr(attn, "kv_lora_rank"):
            raise ValueError(f"model: layer {i} is multi-head latent attention, which QuantizedWindowCache "
                             "cannot serve")
    register_with_mlx_lm()
    return [QuantizedWindowCache(bits, group_size, window) for _ in layers]


def register_with_mlx_lm():
    """Make mlx_lm's load_prompt_cache find the class (it looks names up in its cache module)."""
    try:
        import mlx_lm.models.cache as mlx_lm_cache
    except ImportError:
        return
    mlx_lm_cache.QuantizedWindowCache = QuantizedWindowCache
