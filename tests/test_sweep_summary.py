"""ci/gpu/schedule_sweep.py --summary: a made-up sweep log read back as a line per shape."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def row(var, B, S, us, q4_us, mlx_us):
    return dict(var=var, B=B, S=S, us=us, q4_us=q4_us, mlx_us=mlx_us, GBs=0, vs_mlx=0, err=0)


def summarize(path):
    return subprocess.run([sys.executable, str(ROOT / "ci/gpu/schedule_sweep.py"), "--summary", str(path)],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_a_line_per_shape_in_the_variants_order(tmp_path):
    rows = [row({}, 1, 2048, 25.3, 0.0, 24.0), row({"MAX_BLOCK": 2048}, 1, 2048, 21.0, 0.0, 24.0),
            row({}, 32, 32768, 1041.6, 0.0, 990.1), row({"MAX_BLOCK": 2048}, 32, 32768, 1014.9, 0.0, 990.1)]
    log = tmp_path / "sweep.log"
    log.write_text("mlx 0.32.4\n" + "".join(json.dumps(r) + "\n" for r in rows) + "done\n")
    out = summarize(log)
    assert out[0].split("variants: ")[1] == '{}  {"MAX_BLOCK": 2048}'
    assert out[1].split() == ["1", "2048", "24.0", "25.3", "21.0"]
    assert out[2].split() == ["32", "32768", "990.1", "1041.6", "1014.9"]
    assert len(out) == 3


def test_the_json_file_and_the_4_bit_times(tmp_path):
    path = tmp_path / "schedule_sweep.json"
    path.write_text(json.dumps([row({}, 8, 8192, 91.2, 64.9, 88.1)]))
    assert summarize(path)[1].split() == ["8", "8192", "88.1", "91.2", "/", "64.9"]
