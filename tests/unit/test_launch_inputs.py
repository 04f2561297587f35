"""The GPU launches' constant inputs: long enough to stay out of MLX's small read-mostly pool,
one dims for every S of a single launch."""

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu
from fusedattend._problem import plain_problem, quantized_problem
from fusedattend.gpu import launch as gpu_launch, schedule, sources
from tests.kernels.policy_override import policy_override

DEFAULT = schedule.Policy()  # the shipped schedule


def test_constant_inputs_leave_mlx_small_pool(monkeypatch):
    """dims and scalars are longer than 8 bytes: MLX's CUDA allocator keeps arrays of at most 8
    bytes in a managed pool advised read-mostly, and with the softmax scale and 1.0 there (8 bytes)
    the bf16 decode kernel took 15-28% longer on the H200 (commit d205b41: docs/h200/scalar-pool/). The values
    the kernels read come first, the padding after them."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    q = mx.zeros((1, 8, 1, 64)).astype(mx.bfloat16)
    k = mx.zeros((1, 2, 4096, 64)).astype(mx.bfloat16)
    kq = fa.quantize_kv(k, bits=4, group_size=64)
    problems = [
        (plain_problem(q, k, k, None, None, None), False),  # split
        (plain_problem(q, k[:, :, :100], k[:, :, :100], 0.5, None, None), False),  # one block
        (quantized_problem(q, kq, kq, None, None, None, 4, 64), True),
    ]
    for problem, quantized in problems:
        launch = gpu.decode_launch(problem, quantized=quantized)
        inputs = dict(zip(launch["input_names"], launch["call"]["inputs"]))
        for name in ("dims", "scalars"):
            assert inputs[name].nbytes >= gpu_launch.CONSTANT_INPUT_MIN_BYTES > 8, name
        assert inputs["scalars"][:2].tolist() == [problem.scale, 1.0]
        L, G, block, has_ranges, group_size = inputs["dims"][:5].tolist()
        assert (L, G, has_ranges, group_size) == (1, 4, 0, 64 if quantized else 0)
        if problem.shape[5] == 100:  # one launch: a bound of at least its S keys
            assert block == max(100, DEFAULT.single_pass_max_s)
        else:
            assert block == schedule.block_keys(4096, plain_matrix=not quantized)


def test_single_launches_share_one_dims_for_every_S():
    """A decode loop's single launches (S up to single_pass_max_s) take one dims array, not one
    made for each S (a host-made array each step costs a decode loop: commit d205b41: docs/h200/host-arrays/)."""
    q = mx.zeros((1, 8, 1, 64)).astype(mx.bfloat16)
    k = mx.zeros((1, 2, DEFAULT.single_pass_max_s, 64)).astype(mx.bfloat16)
    dims = {id(gpu.decode_launch(plain_problem(q, k[:, :, :S], k[:, :, :S], None, None, None), quantized=False)["dims"])
            for S in (1, 2, 17, DEFAULT.single_pass_max_s)}
    assert len(dims) == 1


def test_a_single_launch_bound_follows_single_pass_max_s(monkeypatch):
    """A single launch's dims hold the bound its block was made for, which must be at least S:
    a Schedule made under a smaller single_pass_max_s is not taken for a longer one-block call
    (Schedules are cached by the Policy)."""
    q = mx.zeros((1, 8, 1, 64)).astype(mx.bfloat16)
    k = mx.zeros((1, 2, 2000, 64)).astype(mx.bfloat16)

    def bound(S):
        return gpu.decode_launch(plain_problem(q, k[:, :, :S], k[:, :, :S], None, None, None), quantized=False)["dims"][2].item()

    assert bound(300) == DEFAULT.single_pass_max_s
    with policy_override(single_pass_max_s=4096):
        assert bound(2000) == 4096
