"""Every kernel-source mutant (tests/kernels/kernel_mutants.py) is caught by the CPU emulation, and
the emulation's probes pass the kernels as they are: a probe that fails unmutated code proves
nothing about a mutant it catches. Also the emulator's own guards: a read past an input's end
faults, and a threadgroup that never reaches its barrier is reported, not hung."""

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend.gpu import sources
from tests.kernels import kernel_mutants
from tests.kernels.cpu_emulator import EmulatedFault, compiler_available, emulated_gpu
from tests.kernels.emulated_layouts import mask_form, plain_form
from tests.kernels.guarded_memory import GuardedBuffers

pytestmark = pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")


@pytest.mark.parametrize("name", list(kernel_mutants.MUTANTS))
def test_anchor_matches_the_source(name):
    """Each mutant's edit still applies (the text it replaces is there, as often as it says)."""
    m = kernel_mutants.MUTANTS[name]
    assert m.apply(sources.read_kernel_file(m.file)) != sources.read_kernel_file(m.file)
    assert set(m.probes) <= set(kernel_mutants.PROBES)


@pytest.mark.parametrize("probe", list(kernel_mutants.PROBES))
def test_probe_passes_the_kernels_as_they_are(probe):
    assert kernel_mutants.run_probe(kernel_mutants.PROBES[probe]) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", list(kernel_mutants.MUTANTS))
def test_mutant_is_caught(name):
    caught = kernel_mutants.catches(kernel_mutants.MUTANTS[name])
    assert caught is not None, f"kernel mutant {name} SURVIVED: {kernel_mutants.MUTANTS[name].what}"


def test_cli_fails_on_a_survivor_and_writes_the_summary(monkeypatch, tmp_path, capsys):
    """`python -m tests.kernels.kernel_mutants` (the parity gate's step) exits 0 when its mutants
    are caught and 1 when one survives; an edit that changes no result must survive."""
    harmless = kernel_mutants.KernelMutant("harmless", "decode_attention.metal",
                                           "const float row_rescale = FA_FROM_HOLDER(rescale, r);",
                                           "const float row_rescale = FA_FROM_HOLDER(rescale, r) * 1.0f;",
                                           "the same factor", ("plain_split",))
    monkeypatch.setitem(kernel_mutants.MUTANTS, "harmless", harmless)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert kernel_mutants.main(["missing_rescale", "--summary"]) == 0
    assert kernel_mutants.main(["harmless", "--summary"]) == 1
    assert "0 of 1 kernel mutants caught; survived: harmless" in capsys.readouterr().out
    text = summary.read_text()
    assert "| `missing_rescale` |" in text and "| `harmless` |" in text and "**SURVIVED**" in text


def test_lost_anchor_is_an_error_not_a_survivor(monkeypatch):
    m = kernel_mutants.MUTANTS["v_stride_of_k"]
    real = sources.read_kernel_file
    monkeypatch.setattr(sources, "read_kernel_file", lambda name: real(name).replace(m.old, "/* rewritten */"))
    with pytest.raises(kernel_mutants.MutantAnchorLost, match="v_stride_of_k"):
        kernel_mutants.catches(m)


def test_guard_page_after_each_buffer():
    guarded = GuardedBuffers()
    try:
        a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, 1:, ::2]  # a strided view
        b = guarded.place(a, "a")
        assert np.array_equal(a, b) and b.strides == a.strides
        end = b.ctypes.data + (b.shape[0] - 1) * b.strides[0] + (b.shape[1] - 1) * b.strides[1] + \
            (b.shape[2] - 1) * b.strides[2] + b.itemsize
        assert guarded.owner_of(end) == "0 bytes past the end of a"
        assert guarded.owner_of(end - 1) == "within a"
        assert guarded.owner_of(0) is None
    finally:
        guarded.close()


def test_a_read_past_an_input_faults_and_names_it():
    """A kernel whose keys run one past S faults on K's guard page (an error naming k), instead
    of reading memory that a later mask makes harmless; the process survives it."""
    m = kernel_mutants.MUTANTS["read_past_block_end"]
    q = mx.ones((1, 2, 1, 32), dtype=mx.float32)
    k = v = mx.ones((1, 1, 5, 32), dtype=mx.float32)
    with kernel_mutants.mutated(m), emulated_gpu():
        with pytest.raises(EmulatedFault, match="past the end of k"):
            fa.decode_attention(q, k, v, backend="cuda")
    with emulated_gpu():  # and the unmutated kernel runs as before
        assert mx.allclose(fa.decode_attention(q, k, v, backend="cuda"), v[:, :1, :1].astype(mx.float32)).item()


def test_a_barrier_not_every_thread_reaches_is_reported():
    """A barrier inside a branch that only some threads take (a deadlock on a GPU) raises under
    the random fiber order, instead of hanging the test (strict turns spin on it forever)."""
    edit = kernel_mutants.KernelMutant(
        "divergent_barrier", "merge_partials.metal", "float m_all = -INFINITY;",
        "float m_all = -INFINITY;\nif (lane == 0) { threadgroup_barrier(mem_flags::mem_threadgroup); }", "", ())
    q = mx.ones((1, 2, 1, 32), dtype=mx.float32)
    k = v = mx.ones((1, 1, 600, 32), dtype=mx.float32)  # split: the merge launch runs
    with kernel_mutants.mutated(edit), emulated_gpu(fiber_seed=1):
        with pytest.raises(EmulatedFault, match="deadlock"):
            fa.decode_attention(q, k, v, backend="cuda")


def test_layouts_give_each_array_its_own_strides():
    rng = np.random.default_rng(0)
    x = mx.zeros((2, 2, 10, 8), dtype=mx.bfloat16)
    strides = {form: np.asarray(plain_form(x, form, rng).view(mx.uint16)).strides for form in
               ("as_made", "cache", "cache_heads", "rows_padded", "transposed")}
    assert len(set(s[-2] for s in strides.values())) >= 3  # key strides: 8, 8 + spare, 1
    assert len(set(strides.values())) == len(strides)
    m = mx.array(rng.random((3, 10)) < 0.5)
    for form, key_stride in (("keys_strided", 2), ("transposed", 3), ("keys_broadcast", None)):
        out = mask_form(m, form, rng)
        if key_stride is None:
            assert out.shape == (3, 1)
        else:
            assert mx.array_equal(out, m).item() and np.asarray(out).strides[-1] == key_stride
