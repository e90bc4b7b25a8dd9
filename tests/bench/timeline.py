#!/usr/bin/env python3
"""Summarise a draft call's per-block timeline (a build with
-DMTPQ_CUDA_TIMELINE=ON, run with MTPQ_CUDA_TL_FILE=FILE; kernels/rt_tl.cuh).

Usage: timeline.py FILE [NAMES] [STEPS] [STEP]
NAMES: comma-separated names of one step's launches in start order, or "-"
(numbers; tests/bench/device_round.sh). With MTPQ_CUDA_SIDE=0 the start
order is kernels/runtime_cuda.cu's enqueue order; with the shared expert on
its own stream (the default) its three launches start beside the router's.
STEPS: the call's steps (default 3). A step graph's kernel nodes keep their
grid id from step to step, so each launch's records hold all the call's
steps; they are split into STEPS equal runs by start time, and step STEP
(default 1, the middle one of three) is printed: a line per launch with its
blocks, and in microseconds from that step's first start: the first and last
block start, the first and last return from the wait, the median and last
end (warp 0 of each block); "dep" is the first wait's return after the
launch before's last end (what a kernel boundary cost there), "body" the
last end after the first wait's return, "slow SMs" the SMs whose blocks
ended more than 10% of the body after the median; "mid" the median time of
a kernel's marks within (RT_TL_MID, kernels/rt_tl.cuh) after its block's
wait, where it has them (files without the mid columns print none).
"""
import csv
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] != "-" else []
    nsteps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    which = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    by = {}
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            by.setdefault(r["grid"], []).append({k: int(v) for k, v in r.items()})
    if not by:
        sys.exit(f"{sys.argv[1]}: no records")
    steps = []
    for b in by.values():
        b.sort(key=lambda x: x["start"])
        n = len(b) // nsteps
        if n * nsteps != len(b):
            sys.exit(f"{sys.argv[1]}: grid {b[0]['grid']} has {len(b)} records, not a multiple of {nsteps} steps")
        steps.append(b[which * n:(which + 1) * n])
    steps.sort(key=lambda b: b[0]["start"])
    t0 = steps[0][0]["start"]
    us = lambda t: (t - t0) / 1e3
    print(f"{'launch':14s} {'blk':>5s} {'start':>7s} {'last st':>7s} {'waited':>7s} {'last w':>7s} {'med end':>7s} "
          f"{'end':>7s} {'dep':>5s} {'body':>6s}  slow SMs")
    prev = None
    for i, b in enumerate(steps):
        name = names[i] if i < len(names) else str(i)
        st = [x["start"] for x in b]
        wt = [x["waited"] for x in b if x["waited"]] or st
        en = [x["end"] for x in b if x["end"]] or st
        body = (max(en) - min(wt)) / 1e3
        med = statistics.median(en)
        slow = sorted({x["sm"] for x in b if x["end"] and (x["end"] - med) / 1e3 > 0.1 * body and body > 2})
        dep = f"{us(min(wt)) - prev:5.1f}" if prev is not None else f"{'-':>5s}"
        mids = ""
        for k in ("mid1", "mid2"):
            d = [(x[k] - x["waited"]) / 1e3 for x in b if x.get(k) and x["waited"]]
            if d:
                mids += f" {k} +{statistics.median(d):.1f}"
        print(f"{i:2d} {name:11s} {len(b):5d} {us(min(st)):7.1f} {us(max(st)):7.1f} {us(min(wt)):7.1f} "
              f"{us(max(wt)):7.1f} {us(med):7.1f} {us(max(en)):7.1f} {dep} {body:6.1f}  "
              f"{' '.join(map(str, slow[:16]))}{' ...' if len(slow) > 16 else ''}{mids}")
        prev = us(max(en))


if __name__ == "__main__":
    main()
