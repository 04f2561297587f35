"""One line per profiled kernel launch from `ncu --csv --metrics ...` output (ci/gpu/h200-session.sh profile).

    python ci/gpu/ncu_table.py ncu.csv
"""
import csv
import sys

SHORT = {
    "gpu__time_duration.sum": "time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps%",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue%",
    "launch__registers_per_thread": "regs",
    "launch__grid_size": "grid",
    "smsp__inst_executed.sum": "instructions",
}


def main():
    lines = [line for line in open(sys.argv[1]) if line.startswith('"')]
    launches = {}
    for row in csv.DictReader(lines):
        entry = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"][:60]})
        name = SHORT.get(row["Metric Name"], row["Metric Name"])
        entry[name] = f'{row["Metric Value"]} {row["Metric Unit"]}'.strip()
    cols = ["kernel"] + list(SHORT.values())
    print(" | ".join(cols))
    for entry in launches.values():
        print(" | ".join(entry.get(c, "-") for c in cols))


if __name__ == "__main__":
    main()
