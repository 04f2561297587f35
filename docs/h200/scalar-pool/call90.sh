export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R/gaps; date -u > $R/times.txt; git diff > $R/diff.txt
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{ gaps 32 32768 --fmt q4 --impl cuda; gaps 32 32768 --fmt bfloat16 --impl cuda; gaps 1 2048 --fmt q4 --impl cuda; gaps 8 8192 --fmt q4 --impl cuda; } > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tar -czf $OUT/call90.tgz -C $OUT r && rm -rf $R
