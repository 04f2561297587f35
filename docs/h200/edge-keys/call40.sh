#!/usr/bin/env bash
# the tip after 287de59 (2048-key plain blocks from S = 32768) and the one-PITCH stage: the cold table, the layer axis, a perf baseline and a compare against it
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; grep -n "^PLAIN_LONG" fusedattend/gpu.py | tee $R/policy.txt; date -u > $R/times.txt
OUT=$R BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $R/cold-bench.out 2>&1; date -u >> $R/times.txt
OUT=$R timeout 60 python3 ci/gpu/layer_axis.py > $R/layers.log 2>&1; date -u >> $R/times.txt
S=tests/perf/baselines/nvidia-h200
timeout 240 ci/perf.sh record --backend cuda > $R/perf_record.log 2>&1; echo "record rc=$?" >> $R/times.txt; date -u >> $R/times.txt
cp $(ls -d $S/*/* | sort | tail -1) $R/
timeout 150 ci/perf.sh compare --backend cuda > $R/perf_compare.log 2>&1; echo "compare rc=$?" >> $R/times.txt; date -u >> $R/times.txt
cat $R/times.txt; ls $R; tail -n 9 $R/cold-bench.out; tail -n 3 $R/layers.log; tail -n 3 $R/perf_record.log; grep -E "regress|FAIL|again|rows|passed" $R/perf_compare.log | cut -c1-200
tar -czf $OUT/call40.tgz -C $OUT r && rm -rf $R
