"""The kernel under test: where it is found, how it is called (its convention), what it supports.

    kernel = load("mlx.core:fast.scaled_dot_product_attention")            # convention "sdpa"
    kernel = load("fusedattend:decode_attention", "fusedattend", ["layers=yes"])
    out = kernel.call(case)           # the case's arrays through the convention; an mx.array

Conventions (what `call` passes):
    sdpa         f(q, k, v, *, scale, mask)                      mx.fast.scaled_dot_product_attention's
    fusedattend  f(q, k, v, *, scale, mask, key_ranges)          fusedattend.decode_attention's; 4-D or
                                                                 5-D (a layer axis in front)
    quantized    f(q, (codes, scales, biases), (codes, scales, biases), *, scale, mask, bits, group_size)
                                                                 in mx.quantize's format
    mlx_lm       f(q, k, v, cache, scale=, mask=)                mlx_lm.models.base's
                                                                 scaled_dot_product_attention; plain K/V
                                                                 with cache None, quantized triples with
                                                                 a cache holding bits and group_size

Every problem with the kernel argument is a `KernelError` whose message is one line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace

from . import watchdog

CONVENTIONS = {
    "sdpa": "f(q, k, v, *, scale, mask): mx.fast.scaled_dot_product_attention's",
    "fusedattend": "f(q, k, v, *, scale, mask, key_ranges): fusedattend.decode_attention's, layer axis optional",
    "quantized": "f(q, k_triple, v_triple, *, scale, mask, bits, group_size): mx.quantize's format",
    "mlx_lm": "f(q, k, v, cache, scale=, mask=): mlx_lm.models.base.scaled_dot_product_attention's",
}
MASK_KINDS = ("none", "causal", "bool", "additive")
DTYPES = ("float32", "float16", "bfloat16")


class KernelError(Exception):
    """A problem with --fa-kernel / --fa-convention / --fa-supports, said in one line."""


@dataclass(frozen=True)
class Supports:
    """What a kernel takes. Properties needing more are "n/a"; drawn cases stay inside it.

    As text (--fa-supports, repeatable, or a `fa_supports` attribute on the function holding a
    dict or such a string): KEY=VALUE[,VALUE...] with keys
        masks=none,causal,bool,additive   dtypes=float32,float16,bfloat16   head_dims=64,128
        max_L=8   max_S=4096   max_B=4   gqa=yes|no   layers=yes|no   key_ranges=yes|no
        bits=2,4,8   group_sizes=32,64,128   precision=float32|dtype
    precision=dtype says the kernel rounds scores and weights to the input dtype (as MLX's own
    SDPA does on the CPU): parity then allows that rounding (oracle.low_precision_tolerance).
    """

    masks: tuple = MASK_KINDS
    dtypes: tuple = DTYPES
    head_dims: tuple = (64, 128, 32, 80, 96, 256)
    max_L: int = 8
    max_S: int = 4096
    max_B: int = 4
    gqa: bool = True
    layers: bool = False
    key_ranges: bool = False
    bits: tuple = (4, 8, 2)
    group_sizes: tuple = (64, 32, 128)
    precision: str = "float32"

    def declared(self):
        """The fields that differ from the defaults, as text (for the report)."""
        base = Supports()
        out = []
        for name in self.__dataclass_fields__:
            val = getattr(self, name)
            if val != getattr(base, name):
                if isinstance(val, bool):
                    val = "yes" if val else "no"
                elif isinstance(val, tuple):
                    val = ",".join(map(str, val))
                out.append(f"{name}={val}")
        return out


_LISTS = {"masks": MASK_KINDS, "dtypes": DTYPES}
_INT_LISTS = ("head_dims", "bits", "group_sizes")
_INTS = ("max_L", "max_S", "max_B")
_FLAGS = ("gqa", "layers", "key_ranges")


def parse_supports(items, base: Supports) -> Supports:
    """`items`: KEY=VALUE strings (or a dict); returns `base` with them applied."""
    if isinstance(items, dict):
        items = [f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for k, v in items.items()]
    elif isinstance(items, str):
        items = items.split()
    changes = {}
    for item in items:
        key, eq, value = str(item).partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise KernelError(f"--fa-supports {item!r}: expected KEY=VALUE (keys: {', '.join(Supports.__dataclass_fields__)})")
        if key in _LISTS:
            vals = tuple(v.strip() for v in value.split(","))
            bad = [v for v in vals if v not in _LISTS[key]]
            if bad:
                raise KernelError(f"--fa-supports {key}: unknown {', '.join(bad)} (one of {', '.join(_LISTS[key])})")
            changes[key] = vals
        elif key in _INT_LISTS or key in _INTS:
            try:
                vals = tuple(int(v) for v in value.split(","))
            except ValueError:
                raise KernelError(f"--fa-supports {key}={value}: expected integers") from None
            if any(v < 1 for v in vals):
                raise KernelError(f"--fa-supports {key}={value}: must be positive")
            changes[key] = vals if key in _INT_LISTS else vals[0]
        elif key in _FLAGS:
            if value not in ("yes", "no"):
                raise KernelError(f"--fa-supports {key}={value}: expected yes or no")
            changes[key] = value == "yes"
        elif key == "precision":
            if value not in ("float32", "dtype"):
                raise KernelError(f"--fa-supports precision={value}: expected float32 or dtype")
            changes[key] = value
        else:
            raise KernelError(f"--fa-supports {key}: unknown key (keys: {', '.join(Supports.__dataclass_fields__)})")
    return replace(base, **changes)


def _resolve(spec: str):
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise KernelError(f"--fa-kernel {spec}: expected MODULE:ATTR, e.g. mlx.core:fast.scaled_dot_product_attention")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise KernelError(f"--fa-kernel {spec}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from None
    except Exception as e:  # the module itself raises on import: still the caller's kernel, one line
        raise KernelError(f"--fa-kernel {spec}: importing {module_name!r} raised {type(e).__name__}: {e}") from None
    path = module_name
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KernelError(f"--fa-kernel {spec}: {path} has no attribute {part!r}")
        obj = getattr(obj, part)
        path += "." + part
    if not callable(obj):
        raise KernelError(f"--fa-kernel {spec}: {path} is not callable (a {type(obj).__name__})")
    return obj


class _QuantizedCache:
    """What mlx_lm's attention reads off a quantized cache: its bits and group size."""

    def __init__(self, bits, group_size):
        self.bits, self.group_size = bits, group_size


class Refused(Exception):
    """The kernel raised ValueError/TypeError: it does not take this input (conforming)."""


class KernelFailure(Exception):
    """The kernel crashed, or returned something of the wrong shape or dtype."""


@dataclass
class Kernel:
    spec: str
    convention: str
    fn: object
    supports: Supports = field(default_factory=Supports)
    timeout: float = 120.0  # seconds one call may take before the run stops as hung (watchdog.py)

    @property
    def plain(self):
        return self.convention != "quantized"

    @property
    def quantized(self):
        return self.convention in ("quantized", "mlx_lm")

    def arguments(self, q, k, v, mask, key_ranges, scale, bits=None, group_size=None):
        """(args, kwargs) for one call in this kernel's convention."""
        if self.convention == "sdpa":
            return (q, k, v), dict(scale=scale, mask=mask)
        if self.convention == "fusedattend":
            return (q, k, v), dict(scale=scale, mask=mask, key_ranges=key_ranges)
        if self.convention == "quantized":
            return (q, k, v), dict(scale=scale, mask=mask, bits=bits, group_size=group_size)
        cache = None if bits is None else _QuantizedCache(bits, group_size)
        return (q, k, v, cache), dict(scale=scale, mask=mask)

    def call(self, case, **override):
        """Runs the kernel on `case` (fields replaced by `override`: q, k, v, mask, key_ranges).
        Raises Refused for ValueError/TypeError, KernelFailure for any other exception or an
        output that is not an mx.array of q's shape and dtype."""
        import mlx.core as mx

        a = {name: override.get(name, getattr(case, name)) for name in ("q", "k", "v", "mask", "key_ranges")}
        args, kwargs = self.arguments(a["q"], a["k"], a["v"], a["mask"], a["key_ranges"], case.scale,
                                      case.spec.bits or None, case.spec.group_size or None)
        # a fresh handle on the queries: mlx_lm's quantized attention scales them in place (`*=`),
        # which would change the case for the calls after it
        args = (mx.array(args[0]),) + args[1:]
        try:
            with watchdog.bounded(self.timeout, repr(case.spec)):
                out = self.fn(*args, **kwargs)
                if isinstance(out, mx.array):
                    mx.eval(out)
        except (ValueError, TypeError) as e:
            raise Refused(f"{type(e).__name__}: {e}") from None
        except Exception as e:
            raise KernelFailure(f"the kernel raised {type(e).__name__}: {_first_line(e)}") from None
        q = a["q"]
        if not isinstance(out, mx.array):
            raise KernelFailure(f"the kernel returned a {type(out).__name__}, not an mx.array")
        if tuple(out.shape) != tuple(q.shape):
            raise KernelFailure(f"the kernel returned shape {tuple(out.shape)} for queries of shape {tuple(q.shape)}")
        if out.dtype != q.dtype:
            raise KernelFailure(f"the kernel returned {out.dtype} for {q.dtype} queries")
        return out


def _first_line(e):
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def load(spec: str, convention: str = "sdpa", supports=()) -> Kernel:
    """The kernel `spec` names (MODULE:ATTR, ATTR a dotted path), called in `convention`, with
    its `fa_supports` attribute and then `supports` (KEY=VALUE strings) applied."""
    if convention not in CONVENTIONS:
        raise KernelError(f"--fa-convention {convention}: unknown convention (one of {', '.join(CONVENTIONS)})")
    fn = _resolve(spec)
    base = Supports(layers=convention == "fusedattend", key_ranges=convention == "fusedattend")
    declared = getattr(fn, "fa_supports", None)
    if declared is not None:
        if not isinstance(declared, (dict, str, list, tuple)):
            raise KernelError(f"--fa-kernel {spec}: its fa_supports attribute is a {type(declared).__name__}, "
                              "not a dict or a KEY=VALUE string")
        base = parse_supports(declared, base)
    sup = parse_supports(list(supports), base)
    if convention != "fusedattend" and (sup.layers or sup.key_ranges):
        raise KernelError(f"--fa-supports layers/key_ranges: only the fusedattend convention passes them, not {convention}")
    return Kernel(spec, convention, fn, sup)
