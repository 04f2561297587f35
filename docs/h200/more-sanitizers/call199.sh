#!/usr/bin/env bash
# Call 199 (2026-12-05), after staging as for call 196: synccheck over the property suite on
# drawn cases (the "random" set, HYPOTHESIS_PROFILE=sanitize), which calls 197-198 ran under the
# other three tools; six groups side by side, each its own process.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py conftest.py | sort -k2 > $OUT/md5.txt
p=tests/property; m=$p/test_mask_semantics.py
groups=("$p/test_batch_invariance.py"
        "$p/test_determinism.py $p/test_gqa.py $p/test_invalid_inputs.py"
        "$m::test_causal_equals_explicit_lower_right_bool $m::test_bool_equals_additive_zero_neg_inf $m::test_fully_masked_rows_are_exact_zeros $m::test_hidden_keys_may_hold_garbage"
        "$m::test_quantized_hidden_keys_may_hold_garbage $m::test_nan_reaching_a_visible_score_gives_nan_rows $m::test_quantized_nan_scale_of_a_visible_key_gives_nan_rows"
        "$p/test_online_softmax_parity.py"
        "$p/test_quantized.py")
for i in 0 1 2 3 4 5; do
  mkdir -p $OUT/sanitize/g$i
  OUT=$OUT/sanitize/g$i SANITIZER_TOOLS=synccheck SANITIZER_SETS=random SANITIZER_RANDOM_TESTS="${groups[$i]}" \
    SANITIZER_RANDOM_S=${GROUP_S:-330} ci/gpu/h200-session.sh sanitize > $OUT/sanitize/g$i/synccheck.out 2>&1 &
done
wait
grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/sanitize/g*/*.log | sort | uniq -c
grep -h "^========= [A-Z]" $OUT/sanitize/g*/*.log | grep -v "SUMMARY\|COMPUTE-SANITIZER" | sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | sort -rn | head -20
for f in $OUT/sanitize/g*/*-random.log; do echo "$f $(grep -c ' PASSED' $f) passed $(grep -c ' FAILED' $f) failed"; done
date -u >> $OUT/times.txt; tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
