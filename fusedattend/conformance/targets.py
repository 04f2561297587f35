"""fusedattend's own entry points with the backend fixed, as --fa-kernel targets (the committed
reports in docs/conformance/ come from these):

    --fa-kernel fusedattend.conformance.targets:cpu --fa-convention fusedattend
    --fa-kernel fusedattend.conformance.targets:quantized_reference --fa-convention quantized
"""

from __future__ import annotations


def _plain(backend):
    def decode_attention(q, k, v, *, scale=None, mask=None, key_ranges=None):
        import fusedattend

        return fusedattend.decode_attention(q, k, v, scale=scale, mask=mask, key_ranges=key_ranges, backend=backend)

    decode_attention.__doc__ = f"fusedattend.decode_attention(..., backend={backend!r})"
    return decode_attention


def _quantized(backend):
    def quantized_decode_attention(q, k, v, *, scale=None, mask=None, bits, group_size):
        import fusedattend

        return fusedattend.quantized_decode_attention(q, k, v, scale=scale, mask=mask, bits=bits,
                                                      group_size=group_size, backend=backend)

    quantized_decode_attention.__doc__ = f"fusedattend.quantized_decode_attention(..., backend={backend!r})"
    return quantized_decode_attention


reference, cpu, metal, cuda = (_plain(b) for b in ("reference", "cpu", "metal", "cuda"))
quantized_reference, quantized_cpu, quantized_metal, quantized_cuda = (
    _quantized(b) for b in ("reference", "cpu", "metal", "cuda"))
