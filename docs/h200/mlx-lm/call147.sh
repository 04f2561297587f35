#!/usr/bin/env bash
# Call 147 (after three calls carried .gpu/p1-p3; this one carries p4 and installs): fusedattend
# inside mlx_lm models on the H200. The integration's tests with --backend cuda, the logit margins
# behind their tolerance, then a Llama-3-8B-shaped model's decode speed with and without
# fusedattend.patch_mlx_lm().
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MLX_PTX_CACHE_DIR=/tmp/ptx-mlx-lm
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
python3 -c 'import mlx.core as mx, mlx_lm; print("mlx", mx.__version__, "mlx_lm", mlx_lm.__version__)' > $OUT/versions.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> $OUT/versions.txt
timeout 200 python3 -m pytest tests/parity/test_mlx_lm_models.py --backend cuda -q -p no:cacheprovider \
  > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 150 python3 docs/h200/mlx-lm/logit_margins.py cuda > $OUT/margins.log 2>&1
echo "margins rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 220 python3 ci/gpu/mlx_lm_decode.py --json $OUT/decode.json > $OUT/decode.log 2>&1
echo "decode rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -3 $OUT/tests.log; cat $OUT/margins.log $OUT/decode.log $OUT/times.txt
