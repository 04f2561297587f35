#!/usr/bin/env bash
# Where the B = 1 bf16 decode kernel's time goes, instruction by instruction (Nsight Compute's warp-state
# samples, ci/gpu/ncu_stalls.py): before its tile loop, in it, after it; S = 2048 and 32768. metal/ of the tip.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
for S in 2048 32768; do
  timeout 120 ncu --clock-control none -k regex:fa_decode_mma -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -o $R/b1_$S python3 ci/gpu/probe.py 1 $S > $R/ncu_b1_$S.log 2>&1; echo "ncu $S rc=$?" >> $R/times.txt
  ncu -i $R/b1_$S.ncu-rep --page source --csv --print-source sass > $R/b1_$S.csv 2>/dev/null
  ncu -i $R/b1_$S.ncu-rep > $R/b1_${S}_details.txt 2>/dev/null
  python3 ci/gpu/ncu_stalls.py $R/b1_$S.csv 12 > $R/stalls_b1_$S.txt 2>&1
  gzip -f $R/b1_$S.csv; rm -f $R/b1_$S.ncu-rep
done
date -u >> $R/times.txt; cat $R/times.txt
for S in 2048 32768; do echo "=== S=$S"; grep -E "Duration|Registers|Issue Slots Busy|Warp Cycles Per Issued" $R/b1_${S}_details.txt | sed 's/  */ /g'; head -30 $R/stalls_b1_$S.txt | cut -c1-150; done
tar -czf $OUT/call87.tgz -C $OUT r && rm -rf $R
