"""ci/gpu/bench_ab.py: an A/B table from made-up bench runs whose medians are known."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ab_table_reads_variants_and_rounds(tmp_path):
    times = {"0": [20.0, 18.0, 30.0], "1": [12.0, 15.0, 13.0]}
    for variant, rounds in times.items():
        for r, us in enumerate(rounds, 1):
            rows = [dict(format="bfloat16", B=1, S=512, impl="cuda", us=us),
                    dict(format="bfloat16", B=1, S=512, impl="mx.fast.sdpa", us=10.0 + r)]
            (tmp_path / f"ab_{variant}_{r}.json").write_text(json.dumps({"results": rows}))
    out = subprocess.run([sys.executable, str(ROOT / "ci/gpu/bench_ab.py"), str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[2] == "| bfloat16 | 1 | 512 | cuda | 18.0 / 20.0 | 12.0 / 13.0 | -35.0% |"
    assert out[3] == "| bfloat16 | 1 | 512 | mx.fast.sdpa | 11.0 / 12.0 | 11.0 / 12.0 | +0.0% |"
    swapped = subprocess.run([sys.executable, str(ROOT / "ci/gpu/bench_ab.py"), str(tmp_path), "1", "0"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert swapped[2].endswith("| 12.0 / 13.0 | 18.0 / 20.0 | +53.8% |")
