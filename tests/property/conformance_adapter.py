"""tests/property's cases through fusedattend.conformance's properties: each property has one
body (fusedattend/conformance/properties.py), which every kernel the plugin checks gets, and the
suite keeps its own strategies' reach (strided and sliced K/V, every mask shape, KeyRanges in
both forms, the quantized layouts, the pinned edges).

    from tests.property.conformance_adapter import check
    check("batch_invariance", case, backend)      # raises properties.Failure naming the case
"""

from __future__ import annotations

import functools

from fusedattend.conformance import cases as C
from fusedattend.conformance import kernels, properties
from tests.property.strategies import np_key_ranges, request_key_ranges


class PackageCase(C.Case):
    """A conformance Case whose key ranges may also be a fusedattend.KeyRanges: read as pairs,
    and request b's own given in the form that differs from the batch's (strategies'
    request_key_ranges), so both of the words a kernel reads are checked."""

    def np_key_ranges(self):
        return np_key_ranges(self.key_ranges, self.spec.S)

    def request_key_ranges(self, b):
        return request_key_ranges(self.key_ranges, b, self.spec.S)


def conformance_case(case, seed=None):
    """The strategies' Case as a conformance Case over the very same arrays; `seed` replaces
    the one the properties draw their garbage from."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    spec = C.Spec(B=B, H_q=H_q, H_kv=H_kv, L=L, S=S, D=D, dtype=case.dtype_name, mask=case.mask_kind,
                  NL=NL if case.layered else 0, key_ranges=case.key_ranges is not None, bits=case.bits or 0,
                  group_size=case.group_size or 0, seed=case.seed if seed is None else seed)
    return PackageCase(spec, case.q, case.k, case.v, case.mask, case.key_ranges, case.scale, case.k_float,
                       case.v_float)


class _KeepsErrors:
    """fn, remembering the exception it last raised: Kernel.call turns every exception into
    Refused or KernelFailure (a finding about someone's kernel), but here fusedattend refusing a
    valid case, or an emulated GPU's fault, is the test's failure in its own type."""

    def __init__(self, fn):
        self.fn, self.error = fn, None

    def __call__(self, *args, **kwargs):
        try:
            return self.fn(*args, **kwargs)
        except Exception as e:
            self.error = e
            raise


def kernel_for(case, backend):
    """fusedattend on `backend` as a conformance kernel in the fusedattend convention (key
    ranges passed, a layer axis taken). A quantized case's entry point comes with its bits and
    group size bound: the quantized convention would pass no key ranges."""
    import fusedattend as fa

    if case.bits is None:
        fn = functools.partial(fa.decode_attention, backend=backend)
    else:
        fn = functools.partial(fa.quantized_decode_attention, bits=case.bits, group_size=case.group_size,
                               backend=backend)
    name = f"fusedattend.{fn.func.__name__}(backend={backend!r})"
    return kernels.Kernel(name, "fusedattend", _KeepsErrors(fn), kernels.Supports(layers=True, key_ranges=True))


def check(name, case, backend, seed=None):
    """conformance property `name` on the strategies' `case`, fusedattend on `backend`: its
    ratio or None. A Failure names the property, the backend and the case; an exception the
    package raised comes as it was raised."""
    kernel = kernel_for(case, backend)
    try:
        return properties.check(name, kernel, conformance_case(case, seed))
    except properties.Failure as e:
        raise properties.Failure(f"{name} ({backend}): {e.message}: {case!r}", e.finding, e.ratio) from None
    except (kernels.Refused, kernels.KernelFailure):
        if kernel.fn.error is not None:
            raise kernel.fn.error
        raise
