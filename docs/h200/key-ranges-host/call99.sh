# Call 99: what key_ranges costs a decode step by where it was made and how it is checked
# (ci/gpu/key_ranges_cost.py), after call 97 saw a GPU-made key_ranges read by numpy double the kernel
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT/r; mkdir -p $R/cost; date -u > $R/times.txt; md5sum metal/* > $R/metal.md5
for S in 2048 32768; do OUT=$R/cost timeout 200 python3 ci/gpu/key_ranges_cost.py $S > $R/cost/cost_$S.log 2>&1; done
grep -h '^{' $R/cost/cost_*.log | python3 -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r["B"],r["S"],r["key_ranges"][:6],r.get("check","")[:14],r.get("step_wall_us",""),r.get("decode_us_median",""),r.get("decode_us_max",""),r.get("all_kernels_us_a_step",""),r.get("outputs_bit_identical",""))'
tail -3 $R/cost/*.log | grep -iv '^{' 
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call99.tgz -C $OUT r && rm -rf $R
