# Dev helper (not a test): the figures worth reading of an `ncu --csv --page details` log (tests/bench/
# device_lib.sh's dev_ncu_kernel writes one), a line each: launch, kernel, metric, value, unit.
# python3 ncu_pick.py FILE
import csv
import sys

KEEP = ("Duration", "DRAM Throughput", "No Eligible", "Warp Cycles Per Issued Instruction",
        "Active Warps Per Scheduler", "Eligible Warps Per Scheduler", "Achieved Active Warps Per SM",
        "Registers Per Thread", "smsp__inst_executed.sum", "dram__bytes_read.sum")
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14]
for r in rows[1:]:  # ID, ..., Kernel Name (4), ..., Metric Name (12), Metric Unit (13), Metric Value (14)
    if r[12] in KEEP:
        print(r[0], r[4][:32], "|", r[12], r[14], r[13])
