"""ci/gpu/ncu_stalls.py: stall sums of a made-up Nsight Compute source page whose counts are known."""
import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_loop_and_the_rows_around_it(tmp_path):
    header = ["Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)",
              "stall_wait", "stall_long_sb", "stall_Not Issued"]
    rows = [
        ["0", "LDG.E R0, [R2]", "16", "5", "0", "5", "9"],        # before the loop
        ["1", "HMMA R4, R8, R12, R4", "64", "7", "6", "1", "9"],  # the loop: executed most
        ["2", "NOP", "64", "4", "4", "0", "9"],
        ["3", "STG.E [R2], R4", "16", "3", "1", "2", "9"],        # after it
    ]
    path = tmp_path / "q4.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel"])
        w.writerow(header)
        w.writerows(rows)
    out = subprocess.run([sys.executable, str(ROOT / "ci/gpu/ncu_stalls.py"), str(path), "3"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "loop: rows 1-2, executed 64 times; samples 19 in all, 11 in the loop"
    assert out[1] == "wait 10, long_sb 1"  # "Not Issued" columns are not reasons
    assert "before the loop: samples 5" in out
    assert "after the loop: samples 3" in out
    after = out[out.index("after the loop: samples 3") + 1]
    assert after == "long_sb 2, wait 1"
