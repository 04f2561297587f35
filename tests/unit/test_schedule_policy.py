"""The GPU schedule's Policy and its one override, FUSEDATTEND_SCHEDULE=path.json."""

import dataclasses
import json

import mlx.core as mx
import pytest

from fusedattend import backends, gpu
from fusedattend._problem import plain_problem
from fusedattend.gpu import schedule, sources

# The values the schedule shipped with as module constants of fusedattend/gpu.py.
SHIPPED = dict(
    single_pass_max_s=512, target_blocks=32, min_block=256, max_block=1024, plain_long_blocks_from_s=513,
    plain_longer_blocks_from_s=32768, plain_longer_block=2048, quantized_mma_max_d=128, plain_mma_max_d=128,
    plain_mma_min_block=1024, simdgroups=4, quantized_mma_simdgroups=2, plain_mma_simdgroups=4,
    single_pass_simdgroups=4, elements_per_lane=8, max_rows=8, max_row_elements=32, key_bytes_in_flight=32,
    single_pass_key_bytes_in_flight=64, max_keys_in_flight=4, quantized_keys_in_flight=4,
    split_threadgroups_per_sm=4, quantized_mma_threadgroups_per_sm=6, plain_mma_threadgroups_per_sm=0,
    quantized_mma_bounded_max_bits=4, quantized_mma_bounded_max_groups=2, quantized_short_block=512,
    quantized_short_block_threadgroups_per_sm=8, quantized_short_block_prefetch_tiles=2, quantized_stages=2,
    quantized_short_block_stages=2, stage_on_metal=False, plain_prefetch_tiles=4,
    plain_prefetch_max_threadgroups=128, window_block=256,
)


def test_default_policy_is_the_shipped_schedule():
    assert dataclasses.asdict(schedule.Policy()) == SHIPPED


def test_policy_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.Policy().min_block = 1


def _policy_file(tmp_path, text, name="policy.json"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, named", [
    ('{"target_bloks": 16}', "'target_bloks' is not a Policy field"),
    ('{"target_blocks": "16"}', "field 'target_blocks' must be a non-negative integer"),
    ('{"target_blocks": 16.0}', "field 'target_blocks' must be a non-negative integer"),
    ('{"target_blocks": true}', "field 'target_blocks' must be a non-negative integer"),
    ('{"min_block": -1}', "field 'min_block' must be a non-negative integer"),
    ('{"stage_on_metal": 1}', "field 'stage_on_metal' must be true or false"),
    ('{"target_blocks": 0}', "field 'target_blocks' must be at least 1"),
    ('{"simdgroups": 64}', "field 'simdgroups' must be at most 32"),
    ('{"min_block": 2048, "max_block": 1024}', "min_block (2048) must not exceed max_block (1024)"),
    ('{"window_block": 300}', "field 'window_block' must be a power of two, got 300"),
    ('{"window_block": 0}', "field 'window_block' must be at least 1"),
    ('[1, 2]', "must hold a JSON object"),
    ('{"target_blocks": 16', "cannot read a JSON object"),
])
def test_a_bad_policy_file_is_a_one_line_value_error_naming_it(monkeypatch, tmp_path, text, named):
    path = _policy_file(tmp_path, text, name=f"bad-{abs(hash(text))}.json")
    monkeypatch.setenv(schedule.SCHEDULE_ENV, path)
    with pytest.raises(ValueError) as error:
        schedule.current_policy()
    message = str(error.value)
    assert named in message and path in message and "FUSEDATTEND_SCHEDULE" in message
    assert "\n" not in message


def test_a_missing_policy_file_is_named(monkeypatch, tmp_path):
    path = str(tmp_path / "absent.json")
    monkeypatch.setenv(schedule.SCHEDULE_ENV, path)
    with pytest.raises(ValueError, match="absent.json"):
        schedule.current_policy()


def test_unset_or_empty_is_the_default(monkeypatch, tmp_path):
    """(where no chip has a tuned policy: tests/unit/test_tune.py has those)"""
    monkeypatch.setenv(schedule.POLICY_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(schedule.SCHEDULE_ENV, raising=False)
    assert schedule.current_policy() == schedule.Policy()
    monkeypatch.setenv(schedule.SCHEDULE_ENV, "")
    assert schedule.current_policy() == schedule.Policy()


def test_a_policy_file_changes_the_schedule(monkeypatch, tmp_path):
    """A file's fields replace Policy()'s; the rest keep their values. The launch follows it, and
    a replay made under the default is not returned under the file (its key holds the variable)."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    q, k = mx.zeros((1, 8, 1, 64)), mx.zeros((1, 2, 64, 64))
    problem = plain_problem(q, k, k, None, None, None)
    monkeypatch.delenv(schedule.SCHEDULE_ENV, raising=False)
    assert gpu.decode_launch(problem, quantized=False)["single_pass"]
    default_key = backends._replay_key("signature", "cuda")

    path = _policy_file(tmp_path, json.dumps({"single_pass_max_s": 0, "target_blocks": 16}))
    monkeypatch.setenv(schedule.SCHEDULE_ENV, path)
    policy = schedule.current_policy()
    assert policy == dataclasses.replace(schedule.Policy(), single_pass_max_s=0, target_blocks=16)
    launch = gpu.decode_launch(problem, quantized=False)
    assert not launch["single_pass"] and launch["merge_args"] is not None
    assert schedule.block_keys(8192) == 8192 // 16  # the file's target_blocks
    assert backends._replay_key("signature", "cuda") != default_key


def test_schedules_are_cached_per_policy():
    """The same shape under two policies: two Schedules, neither returned for the other."""
    args = ((1, 1, 8, 2, 1, 64, 64), mx.bfloat16)
    kwargs = dict(quantized=False, mask_kind="none", mask_dtype=mx.bool_, bits=None, scales_dtype=None,
                  has_ranges=False, group_size=None, layered=False, on_metal=False)
    default = schedule.schedule_for(*args, **kwargs, policy=schedule.Policy())
    split = schedule.schedule_for(*args, **kwargs, policy=schedule.Policy(single_pass_max_s=0))
    assert default.single_pass and not split.single_pass
    assert schedule.schedule_for(*args, **kwargs, policy=schedule.Policy()) is default
