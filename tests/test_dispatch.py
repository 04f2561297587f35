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


def test_single_pass_env_var_must_be_a_number_of_keys():
    """FUSEDATTEND_SINGLE_PASS_MAX_S (fusedattend.gpu) is refused by name when it is not an integer."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, FUSEDATTEND_SINGLE_PASS_MAX_S="2k")
    proc = subprocess.run([sys.executable, "-c", "import fusedattend.gpu"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "ValueError: FUSEDATTEND_SINGLE_PASS_MAX_S must be a number of keys" in proc.stderr


def test_set_constants_returns_the_old_values_and_forgets_schedules(monkeypatch):
    """gpu.set_constants: the tests' and sweeps' way to try other schedule constants."""
    from fusedattend import gpu
    from fusedattend._problem import plain_problem

    monkeypatch.setattr(gpu, "on_metal", lambda: False)
    q, k = mx.zeros((1, 8, 1, 64)), mx.zeros((1, 2, 4096, 64))
    gpu.decode_launch(plain_problem(q, k, k, None, None, None), quantized=False)
    assert gpu._schedule_launch.cache_info().currsize > 0
    before = gpu.TARGET_BLOCKS
    old = gpu.set_constants({"TARGET_BLOCKS": before * 2})
    try:
        assert old == {"TARGET_BLOCKS": before} and gpu.TARGET_BLOCKS == before * 2
        assert gpu._schedule_launch.cache_info().currsize == 0
    finally:
        gpu.set_constants(old)
    assert gpu.TARGET_BLOCKS == before
    with pytest.raises(AttributeError, match="TARGET_BLOKS"):
        gpu.set_constants({"TARGET_BLOKS": 1})
