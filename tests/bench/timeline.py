#!/usr/bin/env python3
"""Summarise a draft call's per-block timeline (a build with
-DMTPQ_CUDA_TIMELINE=ON, run with MTPQ_CUDA_TL_FILE=FILE; kernels/rt_tl.cuh).

Usage: timeline.py FILE [NAMES] [STEPS] [STEP]
       timeline.py --target FILE
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

--target: FILE is one target forward's timeline (bench-target in a
timeline build with MTPQ_CUDA_TL_FILE=F writes F-NxT for each forward of N
sequences of T tokens, and its marks, F-NxT.names). Its launches, in start
order, are named by the marks (a mark's launches are those since the mark
before it); per name: launches, the summed "dep" (kernel boundaries) and
"body", and the forward's span.
"""
import csv
import statistics
import sys


def load(path):
    """the file's records by grid"""
    by = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            by.setdefault(r["grid"], []).append({k: int(v) for k, v in r.items()})
    if not by:
        sys.exit(f"{path}: no records")
    return by


def target(path):
    launches = sorted(load(path).values(), key=lambda b: min(x["start"] for x in b))
    marks = []
    with open(path + ".names") as f:
        for r in csv.DictReader(f):
            marks.append((r["name"], int(r["launches"])))
    name = []  # the mark after each launch names it
    for (_, a), (nm, b) in zip(marks, marks[1:]):
        name += [nm] * (b - a)
    if len(name) != len(launches):
        sys.exit(f"{path}: {len(launches)} launches recorded, the marks count {len(name)} "
                 "(a kernel without the timeline's records?)")
    agg, order, prev = {}, [], None
    first = min(x["start"] for x in launches[0])
    last = 0
    for nm, b in zip(name, launches):
        wt = [x["waited"] for x in b if x["waited"]] or [x["start"] for x in b]
        en = [x["end"] for x in b if x["end"]] or [x["start"] for x in b]
        dep = (min(wt) - prev) / 1e3 if prev is not None else 0.0
        body = (max(en) - min(wt)) / 1e3
        if nm not in agg:
            agg[nm] = [0, 0.0, 0.0]
            order.append(nm)
        a = agg[nm]
        a[0] += 1
        a[1] += dep
        a[2] += body
        prev, last = max(en), max(last, max(en))
    span = (last - first) / 1e3
    print(f"{'launch':36s} {'n':>4s} {'dep us':>9s} {'body us':>9s} {'sum us':>9s} {'share':>6s}")
    for nm in sorted(order, key=lambda k: -(agg[k][1] + agg[k][2])):
        n, d, b = agg[nm]
        print(f"{nm:36s} {n:4d} {d:9.1f} {b:9.1f} {d + b:9.1f} {100 * (d + b) / span:5.1f}%")
    dep = sum(a[1] for a in agg.values())
    body = sum(a[2] for a in agg.values())
    print(f"{'all':36s} {len(launches):4d} {dep:9.1f} {body:9.1f} {dep + body:9.1f}  span {span:.1f} us")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--target":
        return target(sys.argv[2])
    names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] != "-" else []
    nsteps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    which = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    by = load(sys.argv[1])
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
