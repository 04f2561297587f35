"""A repeat of a checked call replays its launches (backends.replay): no checks, no dispatch, no
launch set-up, only the kernels, handed the new call's arrays. The kernels are recording stubs
here (no GPU needed); the GPU suites run the real ones through the same path."""

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend import _problem, backends, gpu
from fusedattend.benchmarks.harness import first_keys
from fusedattend.gpu import launch as gpu_launch, schedule, sources
from tests.kernels.policy_override import policy_override

DEFAULT = schedule.Policy()  # the shipped schedule

H_Q, H_KV, D = 8, 2, 64


class Recorder:
    """Stands in for gpu_launch._kernel: each kernel it makes records its calls and returns zeros."""

    calls = []
    launch_args = []  # each call's grid and output shapes

    def __init__(self, name, *args, **kwargs):
        self.name = name

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, **kwargs):
        Recorder.calls.append((self.name, list(inputs)))
        Recorder.launch_args.append((self.name, grid, [tuple(shape) for shape in output_shapes]))
        return [mx.zeros(shape, dtype) for shape, dtype in zip(output_shapes, output_dtypes)]


@pytest.fixture
def stub_gpu(monkeypatch):
    """backend="cuda" available, its kernels recorded; counts of the launch set-up in `setups`."""
    available = backends._is_available
    monkeypatch.setattr(backends, "_is_available", lambda name: name == "cuda" or available(name))
    monkeypatch.setattr(gpu_launch, "_kernel", Recorder)
    monkeypatch.setattr(Recorder, "calls", [])
    monkeypatch.setattr(Recorder, "launch_args", [])
    setups = []
    common = gpu_launch._launch_common
    monkeypatch.setattr(gpu_launch, "_launch_common", lambda *args, **kwargs: setups.append(1) or common(*args, **kwargs))
    backends.forget_replays()  # replays hold the kernels they were made with
    schedule._schedule_of_keys.cache_clear()  # so that tests count the Schedules they make
    yield setups
    backends.forget_replays()


def arrays(S, quantized, seed):
    """q, k, v of one signature with other values each seed; k and v slices of a larger cache."""
    mx.random.seed(seed)
    q = mx.random.normal((1, H_Q, 1, D)).astype(mx.bfloat16)
    k, v = (mx.random.normal((1, H_KV, S + 7, D)).astype(mx.bfloat16)[:, :, :S] for _ in range(2))
    if quantized:
        k, v = fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
    return q, k, v


def call(q, k, v, quantized, **kwargs):
    if quantized:
        return fa.quantized_decode_attention(q, k, v, group_size=32, **kwargs)
    return fa.decode_attention(q, k, v, **kwargs)


def grown_past_one_block(quantized):
    """A growing cache's lengths, S = 1 .. single_pass_max_s + 40, and how many schedules they
    take as the kernels need them: one for every S of one block, then one for each split
    schedule (schedule.split_blocks)."""
    lengths = range(1, DEFAULT.single_pass_max_s + 41)
    split = {schedule.split_blocks(S, plain_matrix=not quantized) for S in lengths if S > DEFAULT.single_pass_max_s}
    return lengths, 1 + len(split)


def flat(q, k, v, quantized):
    return [q, *k, *v] if quantized else [q, k, v]


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
@pytest.mark.parametrize("S", [40, 3000], ids=["one_block", "split"])
def test_repeat_replays_the_launches_with_the_new_arrays(stub_gpu, quantized, S):
    first = arrays(S, quantized, 0)
    call(*first, quantized, backend="cuda")
    assert len(stub_gpu) == 1
    launches = len(Recorder.calls)
    assert launches == (1 if S <= DEFAULT.single_pass_max_s else 2)
    for seed in (1, 2):
        again = arrays(S, quantized, seed)
        call(*again, quantized, backend="cuda")
        assert len(stub_gpu) == 1, "the repeat set its launches up again"
        (name, inputs), (_, inputs_before) = Recorder.calls[-launches], Recorder.calls[0]
        passed = flat(*again, quantized)
        assert all(got is want for got, want in zip(inputs, passed))  # the new call's arrays
        assert all(got is want for got, want in zip(inputs[len(passed):], inputs_before[len(passed):]))


def test_what_the_replay_depends_on_is_in_its_key(stub_gpu, monkeypatch):
    """scale, mask and the backend's choice (argument, environment, default device) each set
    the call up anew where they differ from the replayed call's."""
    q, k, v = arrays(40, False, 0)
    fa.decode_attention(q, k, v, backend="cuda")
    fa.decode_attention(q, k, v, backend="cuda", scale=0.5)
    fa.decode_attention(q, k, v, backend="cuda", scale=0.5)
    fa.decode_attention(q, k, v, backend="cuda", mask="causal")
    assert len(stub_gpu) == 3
    assert Recorder.calls[1][1][-1] is Recorder.calls[2][1][-1] is not Recorder.calls[0][1][-1]  # scalars
    monkeypatch.setenv(backends.ENV_VAR, "cuda")
    fa.decode_attention(q, k, v)
    fa.decode_attention(q, k, v)
    assert len(Recorder.calls) == 6
    monkeypatch.setenv(backends.ENV_VAR, "reference")
    out = fa.decode_attention(q, k, v)
    assert len(Recorder.calls) == 6 and mx.array_equal(out, fa.decode_attention(q, k, v, backend="reference"))
    monkeypatch.delenv(backends.ENV_VAR)
    device = mx.default_device()
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)  # backend=None picks "cuda"
    fa.decode_attention(q, k, v)
    fa.decode_attention(q, k, v)
    assert len(Recorder.calls) == 8
    monkeypatch.setattr(mx, "default_device", lambda: mx.cpu)  # now "cpu" or "reference"
    fa.decode_attention(q, k, v)
    assert len(Recorder.calls) == 8
    monkeypatch.setattr(mx, "default_device", lambda: device)


def test_mask_arrays_are_set_up_every_call(stub_gpu):
    """The mask's check and broadcast read the array given: never replayed."""
    q, k, v = arrays(40, False, 0)
    mask = mx.ones((1, 1, 1, 40), dtype=mx.bool_)
    for _ in range(2):
        fa.decode_attention(q, k, v, backend="cuda", mask=mask)
    assert len(stub_gpu) == 2


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_a_growing_cache_with_a_mask_makes_one_launch_a_schedule(stub_gpu, quantized):
    """Calls with a mask array are set up every call, but what their launches take of S is only
    their schedule (schedule.key_schedule): a growing cache makes one Launch for all its single
    launches, then one for each split schedule, not one for each S."""
    lengths, schedules = grown_past_one_block(quantized)
    q, k, v = arrays(lengths[-1], quantized, 0)
    for S in lengths:
        mask = mx.ones((1, 1, 1, S), dtype=mx.bool_)
        call(q, first_keys(k, S), first_keys(v, S), quantized, backend="cuda", mask=mask)
    assert len(stub_gpu) == len(lengths)
    assert schedule._schedule_of_keys.cache_info().misses == schedules


def ranges_input(quantized):
    """The key_ranges input of the last decode kernel call (after q, K/V and the mask), and
    whether its dims input tells the kernel to read it."""
    decode = [inputs for name, inputs in Recorder.calls if name != "fa_merge_partials"][-1]
    kv_end = 7 if quantized else 3
    return decode[kv_end + 1], bool(decode[kv_end + 2][3].item())


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
@pytest.mark.parametrize("S", [40, 3000], ids=["one_block", "split"])
def test_key_ranges_replay_with_the_new_values(stub_gpu, quantized, S):
    """key_ranges enter the signature by shape and dtype: a repeat with other ranges replays the
    launches, handing the kernel the new ranges (int32, as the first call's were)."""
    q, k, v = arrays(S, quantized, 0)
    for start, length in ((0, S), (3, S - 10), (S, 0)):
        for dtype in (mx.int32, mx.int64):
            ranges = mx.array([[start, length]], dtype=dtype)
            call(q, k, v, quantized, backend="cuda", key_ranges=ranges)
            got, read = ranges_input(quantized)
            assert read and got.dtype == mx.int32 and got.tolist() == [[start, length]]
    assert len(stub_gpu) == 2  # one signature for each dtype
    call(q, k, v, quantized, backend="cuda")  # without key_ranges: another signature
    assert len(stub_gpu) == 3
    assert not ranges_input(quantized)[1]
    call(q, k, v, quantized, backend="cuda", key_ranges=mx.array([[1, 2]], dtype=mx.int32))
    assert len(stub_gpu) == 3 and ranges_input(quantized)[0].tolist() == [[1, 2]]


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_replayed_key_ranges_values_are_checked(stub_gpu, quantized):
    """A repeat checks its key_ranges' values against its own S: bad values raise after replays,
    as on the first call, and nothing is launched for them."""
    q, k, v = arrays(40, quantized, 0)
    for S in (40, 39):
        call(q, first_keys(k, S), first_keys(v, S), quantized, backend="cuda",
             key_ranges=mx.array([[0, S]], dtype=mx.int64))
    assert len(stub_gpu) == 1  # one block of S keys: one launcher for every S (the replayer's key_schedule)
    launched = len(Recorder.calls)
    k39, v39 = first_keys(k, 39), first_keys(v, 39)
    for bad in ([[0, 40]], [[-1, 2]], [[40, 0]], [[2, -1]], [[2**62, 2**62]]):
        with pytest.raises(ValueError, match="key_ranges"):
            call(q, k39, v39, quantized, backend="cuda", key_ranges=mx.array(bad, dtype=mx.int64))
    assert len(Recorder.calls) == launched
    with pytest.raises(ValueError, match="key_ranges must have shape"):
        call(q, k39, v39, quantized, backend="cuda", key_ranges=mx.array([[0, 1], [0, 1]], dtype=mx.int64))
    with pytest.raises(TypeError, match="key_ranges"):
        call(q, k39, v39, quantized, backend="cuda", key_ranges=mx.array([[0.0, 1.0]]))
    with pytest.raises(TypeError, match="key_ranges"):
        call(q, k39, v39, quantized, backend="cuda", key_ranges=[[0, 1]])


def test_another_policy_never_takes_this_ones_replay(stub_gpu):
    """A replay holds the kernels and the schedule it was made with: replays are keyed by
    FUSEDATTEND_SCHEDULE (the Policy), so a call under another policy sets itself up, and the
    default's replay serves the default again afterwards."""
    q, k, v = arrays(40, False, 0)
    fa.decode_attention(q, k, v, backend="cuda")
    assert len(Recorder.calls) == 1  # one block
    with policy_override(single_pass_max_s=0):
        fa.decode_attention(q, k, v, backend="cuda")
        assert len(Recorder.calls) == 3  # split: decode and merge
    fa.decode_attention(q, k, v, backend="cuda")
    assert len(Recorder.calls) == 4 and len(stub_gpu) == 2


def test_bad_calls_still_raise_after_replays(stub_gpu):
    q, k, v = arrays(40, False, 0)
    for _ in range(2):
        fa.decode_attention(q, k, v, backend="cuda")
    with pytest.raises(ValueError, match="backend='tpu'"):
        fa.decode_attention(q, k, v, backend="tpu")
    with pytest.raises(ValueError, match="scale"):
        fa.decode_attention(q, k, v, backend="cuda", scale=float("nan"))
    with pytest.raises(TypeError, match="scale"):
        fa.decode_attention(q, k, v, backend="cuda", scale=[0.5])
    with pytest.raises(ValueError, match="batch size 2"):
        fa.decode_attention(q, mx.concatenate([k, k]), v, backend="cuda")


def test_scales_and_biases_reach_the_kernel_in_k_scales_dtype(stub_gpu):
    """Biases and v's scales of another dtype than k's scales are cast to it (the kernel's ST names
    one), on the first call and on its replay."""
    for seed in (0, 1):
        q, (kc, ks, kb), (vc, vs, vb) = arrays(40, True, seed)
        k, v = (kc, ks, kb.astype(mx.float32)), (vc, vs.astype(mx.float16), vb.astype(mx.float32))
        fa.quantized_decode_attention(q, k, v, group_size=32, backend="cuda")
        inputs = Recorder.calls[-1][1]
        assert [inputs[i].dtype for i in (2, 3, 5, 6)] == [ks.dtype] * 4
        assert inputs[1] is kc and inputs[4] is vc
    assert len(stub_gpu) == 1


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_a_growing_cache_is_checked_once(stub_gpu, monkeypatch, quantized):
    """A decode loop's K/V grow a key a step (S is left out of the signature): the checks run
    once for the loop, the launches are set up once for each schedule S passes through (one
    block; then each block count), and each step launches exactly what the same call set up
    afresh launches."""
    steps = [DEFAULT.single_pass_max_s - 1, DEFAULT.single_pass_max_s, DEFAULT.single_pass_max_s + 1,
             DEFAULT.single_pass_max_s + 2, 3000, 3001, 3002, 3000]
    q, k, v = arrays(max(steps), quantized, 0)
    checks = []
    layered_queries = _problem._layered_queries
    monkeypatch.setattr(_problem, "_layered_queries", lambda *a: checks.append(1) or layered_queries(*a))
    _problem._CHECKED.clear()
    for S in steps:
        call(q, first_keys(k, S), first_keys(v, S), quantized, backend="cuda")
    replayed = list(Recorder.launch_args)
    assert len(checks) == 1
    # Three schedules: one block (of 511 keys and of 512 alike), then split blocks alike for
    # S = 513-514 and again for S = 3000-3002.
    assert len(stub_gpu) == 3
    assert schedule.split_blocks(513, plain_matrix=not quantized) == schedule.split_blocks(514, plain_matrix=not quantized)
    fresh = []
    for S in steps:
        backends.forget_replays()
        _problem._CHECKED.clear()
        Recorder.launch_args.clear()
        call(q, first_keys(k, S), first_keys(v, S), quantized, backend="cuda")
        fresh += Recorder.launch_args
    assert replayed == fresh


def test_other_key_lengths_still_raise(stub_gpu):
    """S left out of the signature: K and V (or codes and scales) of different S, or S = 0, are
    still checked in full after replays."""
    q, k, v = arrays(40, False, 0)
    for S in (40, 39):
        fa.decode_attention(q, k[:, :, :S], v[:, :, :S], backend="cuda")
    with pytest.raises(ValueError, match="S"):
        fa.decode_attention(q, k[:, :, :38], v[:, :, :39], backend="cuda")
    with pytest.raises(ValueError, match="S = 0"):
        fa.decode_attention(q, k[:, :, :0], v[:, :, :0], backend="cuda")
    q, k, v = arrays(40, True, 0)
    for S in (40, 39):
        fa.quantized_decode_attention(q, first_keys(k, S), first_keys(v, S), group_size=32, backend="cuda")
    codes, scales, biases = first_keys(k, 39)
    with pytest.raises(ValueError, match="every axis but the last"):
        fa.quantized_decode_attention(q, (codes, scales[:, :, :38], biases), first_keys(v, 39), group_size=32,
                                      backend="cuda")


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_a_growing_cache_makes_no_kernel_input_each_step(stub_gpu, quantized):
    """Every decode-kernel input that is not the caller's (mask and key_ranges stand-ins, dims,
    scalars) is one of a few arrays made once, not one made each step. On MLX's CUDA backend a
    kernel waits for the page of an array the host wrote that step: with a dims array made for
    each S of a loop's single launches the kernels took 134-170 µs a step against 7-10, the loop
    395-511 against 97-106, every step evaluated (commit d205b41: docs/h200/host-arrays/)."""
    lengths, schedules = grown_past_one_block(quantized)
    q, k, v = arrays(lengths[-1], quantized, 0)
    for S in lengths:
        call(q, first_keys(k, S), first_keys(v, S), quantized, backend="cuda")
    ours = [inputs[-4:] for name, inputs in Recorder.calls if "merge" not in name]
    assert len(ours) == len(lengths)
    for position, name in enumerate(schedule.COMMON_INPUTS):
        made = {id(inputs[position]) for inputs in ours}  # the recorded inputs stay alive: ids are unique
        assert len(made) <= (2 if name == "dims" else 1), (name, len(made))  # dims: one block, then split
    # and the launches are set up once for all its single launches, then once per split schedule
    assert len(stub_gpu) == schedules
