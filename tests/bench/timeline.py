#!/usr/bin/env python3
"""Summarise a draft call's per-block timeline (a build with
-DMTPQ_CUDA_TIMELINE=ON, run with MTPQ_CUDA_TL_FILE=FILE; kernels/rt_tl.cuh).

Usage: timeline.py FILE [NAMES]
NAMES: comma-separated names of one step's launches in enqueue order (for
the 80B shape at batch 1: tests/bench/device_timeline.sh passes them); the
launches of a call's steps are named in turn. Prints a line per launch, in
order of its first block's start: blocks, SMs, and in microseconds from the
call's first start: first and last block start, first and last return from
the wait, first and last end (warp 0 of each block), and the spread of the
ends (last - median), which is where a launch's slowest blocks show.
"""
import csv
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else []
    by = {}
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            by.setdefault(r["grid"], []).append({k: int(v) for k, v in r.items() if k != "grid"})
    if not by:
        sys.exit(f"{sys.argv[1]}: no records")
    launches = sorted(by.values(), key=lambda b: min(x["start"] for x in b))
    t0 = min(x["start"] for x in launches[0])
    us = lambda t: (t - t0) / 1e3
    print(f"{'launch':24s} {'blk':>5s} {'SMs':>4s} {'start':>8s} {'last st':>8s} {'waited':>8s} {'last w':>8s} "
          f"{'end':>8s} {'last end':>8s} {'tail':>6s}")
    for i, b in enumerate(launches):
        name = names[i % len(names)] if names else str(i)
        st = [x["start"] for x in b]
        wt = [x["waited"] for x in b if x["waited"]]
        en = [x["end"] for x in b if x["end"]]
        w = f"{us(min(wt)):8.1f} {us(max(wt)):8.1f}" if wt else f"{'-':>8s} {'-':>8s}"
        e = (f"{us(min(en)):8.1f} {us(max(en)):8.1f} {(max(en) - statistics.median(en)) / 1e3:6.1f}" if en
             else f"{'-':>8s} {'-':>8s} {'-':>6s}")
        print(f"{i:3d} {name:20s} {len(b):5d} {len({x['sm'] for x in b}):4d} {us(min(st)):8.1f} {us(max(st)):8.1f} "
              f"{w} {e}")


if __name__ == "__main__":
    main()
