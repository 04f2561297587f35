"""backend=None: the choice between backends never depends on B or NL (batch invariance)."""

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend import backends


@pytest.mark.parametrize("S", [16, 300, 4096])
def test_default_choice_is_the_same_for_a_batch_and_its_requests(monkeypatch, S):
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    chosen = []
    real = backends._module

    def spy(modname):
        chosen.append(modname)
        return real(modname)

    monkeypatch.setattr(backends, "_module", spy)
    # A repeat of an earlier call's signature (another S here: S is not in it) replays its
    # launches without the dispatch spied on: on a GPU every S after the first did.
    backends.forget_replays()
    q = mx.random.normal((3, 8, 8, 1, 64))
    k = mx.random.normal((3, 8, 2, S, 64))
    out = fa.decode_attention(q, k, k)
    batched, dispatched = chosen[-1], len(chosen)
    one = fa.decode_attention(q[0, :1], k[0, :1], k[0, :1])
    assert len(chosen) > dispatched and chosen[-1] == batched
    assert mx.array_equal(out[0, :1], one)
