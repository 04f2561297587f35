#!/usr/bin/env bash
# MLX's CUDA build (about 90 MB, staged in .gpu/ by shared/gpu/stage-mlx-cuda.sh) in as many
# device calls as the 64 MiB a call carries allow beside this working tree (27 MB on 2026-12-01,
# 42 MB on 2026-12-05, growing with docs/):
#   here:       ci/gpu/stage-parts.sh split [.gpu]      -> .gpu/p1, .gpu/p2, ... and the calls to make
#   device, each part in its own call, in order (carry [".gpu/pN"]):
#               bash ci/gpu/stage-parts.sh receive .gpu/pN
#   device, in the last part's call:  bash ci/gpu/stage-parts.sh install
# The machine keeps what a call received only while it stays warm (about 30 s after a call), so
# make the calls one right after the other; `install` says which parts it is missing.
set -euo pipefail
chunks=${FA_STAGE_CHUNKS:-/root/.mlx-cuda-chunks}
case "${1:-}" in
  split)
    gpu=${2:-.gpu}
    [[ -f $gpu/a/install.sh && -f $gpu/b/part.01 ]] || { echo "no staged MLX under $gpu (run shared/gpu/stage-mlx-cuda.sh $gpu)" >&2; exit 2; }
    # What else travels: the files git tracks and the untracked ones it does not ignore.
    tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
    limit=${FA_STAGE_LIMIT_BYTES:-$((64 * 1024 * 1024))}  # what one call carries
    # for files added before the calls, and what the device tool counts beyond the files (on
    # 2026-12-05 a 23.5 MB part beside a 41.8 MB tree was refused as over 64 MiB)
    spare=${FA_STAGE_SPARE_BYTES:-$((8 * 1024 * 1024))}
    part=$((limit - tree - spare))
    (( part >= limit / 8 )) || { echo "the working tree ($tree bytes) leaves too little room" >&2; exit 2; }
    rm -rf "$gpu"/p[0-9]* "$gpu/all.tar"
    # b's install.sh stands in for a's: both are the same script (it installs from part.00 and part.01).
    tar -C "$gpu" -cf "$gpu/all.tar" --exclude=a/install.sh a b
    split -b "$part" -d -a 2 "$gpu/all.tar" "$gpu/chunk."
    rm "$gpu/all.tar"
    n=0
    for c in "$gpu"/chunk.*; do
      n=$((n + 1)); mkdir -p "$gpu/p$n"; mv "$c" "$gpu/p$n/"
    done
    echo "$n parts of at most $part bytes (tree: $tree bytes). On the device, one call each, in order:"
    for i in $(seq 1 "$n"); do
      extra=""; (( i == n )) && extra=" && bash ci/gpu/stage-parts.sh install"
      echo "  carry [\"$gpu/p$i\"]: bash ci/gpu/stage-parts.sh receive $gpu/p$i$extra"
    done ;;
  receive)
    python3 -c 'import mlx.core' 2>/dev/null && { echo "mlx already installed"; exit 0; }
    mkdir -p "$chunks"; cp "${2:?usage: receive DIR}"/chunk.* "$chunks"/; ls "$chunks" ;;
  install)
    python3 -c 'import mlx.core' 2>/dev/null && { echo "mlx already installed"; exit 0; }
    stage=$chunks.tree
    rm -rf "$stage"; mkdir -p "$stage"
    cat "$chunks"/chunk.* | tar -x -C "$stage" || { echo "parts missing or cut: $(ls "$chunks" 2>/dev/null | tr '\n' ' ')" >&2; exit 3; }
    cp "$stage"/a/* "$stage"/b/
    bash "$stage/b/install.sh" finish ;;
  *) echo "usage: ci/gpu/stage-parts.sh split [GPU_DIR] | receive DIR | install" >&2; exit 2 ;;
esac
