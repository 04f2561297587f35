"""quantized_decode_attention vs mlx_lm.models.base.quantized_scaled_dot_product_attention and
the oracle, over GRID_Q (bits 4/8, group sizes 32/64/128, GQA 1/4).

mlx_lm computes scores with mx.quantized_matmul in the queries' dtype, turns bool masks into
finfo.min (not -inf) and rounds the softmax weights to the dtype before the second quantized
matmul: the tolerance is peer_tolerance = our float32 bound + the dtype-rounding bound
V (2 u A + 3 u) (oracle.low_precision_tolerance). GRID_Q masks keep one visible key per row,
where finfo.min and -inf agree.
"""

import numpy as np
import pytest

from tests.parity import grids
from tests.parity.grids import GRID_Q, compare, make_case, oracle_reference, peer_tolerance, tolerance


@pytest.mark.parametrize("case", GRID_Q, ids=lambda c: c.id)
def test_quantized_vs_oracle(case, backend):
    c = make_case(case, seed=0)
    out = grids.run(c, backend)
    assert out.dtype == case.dtype
    expected, stats = oracle_reference(c)
    ratio, err = compare(out, expected, tolerance(c, expected, stats))
    assert ratio <= 1.0, f"vs oracle: err {err:.3g} = {ratio:.3g}x tolerance"
    assert np.all(grids.np_of(out)[~grids.visible_rows(c)] == 0)


# Kept apart from the oracle test so a failure says which side moved: on MLX 0.32.4's CUDA
# backend (H200, 2026-11-29) the combined test failed for 29 of the 48 cases with --backend cuda,
# and the run did not record whether the oracle or the mlx_lm assertion broke (the property
# suite's quantized properties passed there). Not yet diagnosed.
@pytest.mark.parametrize("case", GRID_Q, ids=lambda c: c.id)
def test_quantized_vs_mlx_lm(case, backend):
    c = make_case(case, seed=0)
    out = grids.run(c, backend)
    expected, stats = oracle_reference(c)
    peer = grids.mlx_lm_peer(c)
    rows = grids.visible_rows(c)
    ratio, err = compare(out, grids.np_of(peer), peer_tolerance(c, expected, stats), rows)
    assert ratio <= 1.0, f"vs mlx_lm: err {err:.3g} = {ratio:.3g}x tolerance"
