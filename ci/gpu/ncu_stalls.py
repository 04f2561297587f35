"""Where a kernel's loop waits, instruction by instruction, from Nsight Compute's source page.

    ncu --clock-control none -k regex:fa_quantized_decode_mma -c 1 --section SourceCounters \
        --section WarpStateStats -o q4 python3 ci/gpu/probe.py 32 32768
    ncu -i q4.ncu-rep --page source --csv --print-source sass > q4.csv
    python ci/gpu/ncu_stalls.py q4.csv [TOP]

Prints the stall reasons summed over the hottest loop (the instructions executed most often) and
its TOP (12) instructions by warp-state samples, each with its four largest reasons; then the same
for the instructions before the loop and after it (setup, and the merge and the writes), with
TOP // 3 instructions each.
"""
import csv
import sys


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]  # rows[0] names the kernel
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = "Warp Stall Sampling (All Samples)"

    def count(row, name):
        return int(row[col[name]] or 0)

    def sampled(rows):
        return sum(count(data[i], samples) for i in rows)

    executed = [count(r, "Instructions Executed") for r in data]
    hot = [i for i, e in enumerate(executed) if e == max(executed)]
    lo, hi = min(hot), max(hot)
    print(f"loop: rows {lo}-{hi}, executed {max(executed)} times; samples {sampled(range(len(data)))} "
          f"in all, {sampled(range(lo, hi + 1))} in the loop")

    def summary(rows, top):
        totals = {r: sum(count(data[i], r) for i in rows) for r in reasons}
        print(", ".join(f"{r[6:]} {v}" for r, v in sorted(totals.items(), key=lambda x: -x[1]) if v))
        for i in sorted(sorted(rows, key=lambda i: -count(data[i], samples))[:top]):
            why = sorted(((count(data[i], r), r[6:]) for r in reasons), reverse=True)[:4]
            print(f"{i:5d} {count(data[i], samples):6d}  {data[i][1].strip()[:58]:58s}  " +
                  ", ".join(f"{name} {n}" for n, name in why if n))

    summary(range(lo, hi + 1), top)
    for name, rows in (("before the loop", range(0, lo)), ("after the loop", range(hi + 1, len(data)))):
        print(f"{name}: samples {sampled(rows)}")
        summary(rows, max(1, top // 3))


if __name__ == "__main__":
    main()
