#!/usr/bin/env bash
# Call 198 (2026-12-04), after staging as for call 196: the rest of call 197's "random" set, which
# the 540 s limit cut inside tests/property/test_mask_semantics.py: the mask tests not yet run
# under every tool, tests/property/test_online_softmax_parity.py and tests/property/test_quantized.py
# (HYPOTHESIS_PROFILE=sanitize), in four groups, each under initcheck (host API checks off, as in
# call 197), memcheck and racecheck: twelve processes side by side.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py conftest.py | sort -k2 > $OUT/md5.txt
m=tests/property/test_mask_semantics.py
groups=("tests/property/test_online_softmax_parity.py"
        "tests/property/test_quantized.py"
        "$m::test_bool_equals_additive_zero_neg_inf $m::test_fully_masked_rows_are_exact_zeros $m::test_hidden_keys_may_hold_garbage"
        "$m::test_quantized_hidden_keys_may_hold_garbage $m::test_nan_reaching_a_visible_score_gives_nan_rows $m::test_quantized_nan_scale_of_a_visible_key_gives_nan_rows")
for i in 0 1 2 3; do
  mkdir -p $OUT/sanitize/g$i
  OUT=$OUT/sanitize/g$i SANITIZER_TOOLS=initcheck SANITIZER_OPTIONS="--check-api-memory-access no" SANITIZER_SETS=random \
    SANITIZER_RANDOM_TESTS="${groups[$i]}" SANITIZER_RANDOM_S=420 ci/gpu/h200-session.sh sanitize > $OUT/sanitize/g$i/initcheck.out 2>&1 &
  OUT=$OUT/sanitize/g$i SANITIZER_TOOLS="memcheck racecheck" SANITIZER_PARALLEL=1 SANITIZER_SETS=random \
    SANITIZER_RANDOM_TESTS="${groups[$i]}" SANITIZER_RANDOM_S=420 ci/gpu/h200-session.sh sanitize > $OUT/sanitize/g$i/others.out 2>&1 &
done
wait
grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/sanitize/g*/*.log | sort | uniq -c
grep -h "^========= [A-Z]" $OUT/sanitize/g*/*.log | grep -v "SUMMARY\|COMPUTE-SANITIZER" | sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | sort -rn | head -20
grep -h -m2 -A14 "^========= [A-Z][a-z]" $OUT/sanitize/g*/*.log | head -40
for f in $OUT/sanitize/g*/*-random.log; do echo "$f $(grep -c ' PASSED' $f) passed $(grep -c ' FAILED' $f) failed"; done
date -u >> $OUT/times.txt; tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
