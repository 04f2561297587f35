#!/usr/bin/env bash
# Call 179, right after 178 (one command line; unpacked here into cold/, chain/ and
# layer_axis.log): issue 5's table again, cold and chained, and the layer axis (NL = 36).
export PYTHONPATH=$PWD; R=$OUT; date -u > $R/times.txt; OUT=$R/cold BENCH_S=140 ci/gpu/h200-session.sh cold-bench | tail -8; date -u >> $R/times.txt; OUT=$R/chain BENCH_S=140 ci/gpu/h200-session.sh chain-bench | tail -8; timeout 40 python3 ci/gpu/layer_axis.py > $R/layer_axis.log 2>&1; tail -4 $R/layer_axis.log; date -u >> $R/times.txt; cd $R && tar czf tables.tgz cold chain layer_axis.log && rm -rf cold chain layer_axis.log; cat times.txt
