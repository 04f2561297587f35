"""ci/gpu/stage-parts.sh split: parts that fit beside the working tree and put the staged build back
together byte for byte."""
import io
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_split_fits_the_call_and_reassembles(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "tracked.txt").write_bytes(b"t" * 30_000)  # travels with every call
    (repo / ".gitignore").write_text("/.gpu/\n")
    staged = {
        "a/install.sh": b"#!/bin/sh\n",
        "a/mlx.whl": os.urandom(90_000),
        "a/part.00": os.urandom(120_000),
        "b/install.sh": b"#!/bin/sh\n",
        "b/part.01": os.urandom(110_000),
    }
    for name, data in staged.items():
        (repo / ".gpu" / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / ".gpu" / name).write_bytes(data)
    limit = 200_000
    env = dict(os.environ, FA_STAGE_LIMIT_BYTES=str(limit), FA_STAGE_SPARE_BYTES="1000")
    out = subprocess.run(["bash", str(ROOT / "ci/gpu/stage-parts.sh"), "split", ".gpu"], cwd=repo, env=env,
                         capture_output=True, text=True, check=True).stdout
    parts = sorted((repo / ".gpu").glob("p*"), key=lambda p: int(p.name[1:]))
    assert len(parts) >= 2 and f"{len(parts)} parts" in out
    tree = sum(f.stat().st_size for f in [repo / "tracked.txt", repo / ".gitignore"])
    chunks = [next(p.iterdir()) for p in parts]
    assert all(c.stat().st_size + tree <= limit for c in chunks)
    assert out.rstrip().endswith(f"receive .gpu/p{len(parts)} && bash ci/gpu/stage-parts.sh install")
    whole = b"".join(c.read_bytes() for c in chunks)
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert got == {name: data for name, data in staged.items() if name != "a/install.sh"}
