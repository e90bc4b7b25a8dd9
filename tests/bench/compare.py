#!/usr/bin/env python3
"""Compare two `mtpq bench-step --json` results row by row.

Usage: compare.py BEFORE.json AFTER.json [--max-pct X] [--markdown]

A file that is not JSON is read as bench-step's text table (a tree from
before --json existed): its rows' last twelve columns.

Rows match on (drafter kind, drafter name, context, batch); the drafter name
is the path's last component (the stock drafter has one row a context and
batch), so two trees' runs over the same fixture match.
For each row: us/step and dev us of both runs and the change in percent
(positive: AFTER is slower). With --max-pct, exits 1 when any row's dev us
(us/step where the backend has no device time) is more than X percent slower
in AFTER, so a device script can gate on it. --markdown prints a table for the
performance page instead of plain columns.
"""
import argparse
import json
import os
import sys


def text_rows(text):
    rows = []
    for line in text.splitlines():
        t = line.split()
        if len(t) < 13 or not t[-12].isdigit() or not t[-11].isdigit() or not t[-4].endswith("x"):
            continue
        name = " ".join(t[:-12])
        num = lambda v: -1.0 if v == "-" else float(v.rstrip("x%").replace(",", ""))
        rows.append({"drafter": name, "kind": "stock" if name.startswith("stock") else "drafter",
                     "context": int(t[-12]), "batch": int(t[-11]), "us_per_step": num(t[-10]),
                     "dev_us": num(t[-2])})
    return {"rows": rows}


def rows(path):
    with open(path) as f:
        text = f.read()
    try:
        r = json.loads(text)
    except ValueError:
        r = text_rows(text)
    out = {}
    for x in r["rows"]:
        name = "stock" if x["kind"] == "stock" else os.path.basename(x["drafter"].rstrip("/"))
        key = (x["kind"], name, x["context"], x["batch"])
        out[key] = x
    return r, out


def pct(a, b):
    return 100.0 * (b - a) / a if a and a > 0 and b and b > 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--max-pct", type=float)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    rb, b = rows(a.before)
    ra, f = rows(a.after)
    common = [k for k in b if k in f]
    if not common:
        print("compare.py: no rows in common", file=sys.stderr)
        return 2
    worst = None
    if a.markdown:
        print("| drafter | context | batch | before us | after us | change | before dev us | after dev us | change |")
        print("|---|---|---|---|---|---|---|---|---|")
    else:
        print(f"{'drafter':<24} {'context':>7} {'batch':>5} {'before':>9} {'after':>9} {'change':>8} "
              f"{'dev before':>10} {'dev after':>10} {'change':>8}")
    for k in common:
        x, y = b[k], f[k]
        d = pct(x["us_per_step"], y["us_per_step"])
        dd = pct(x.get("dev_us"), y.get("dev_us"))
        gate = dd if dd is not None else d
        if gate is not None and (worst is None or gate > worst):
            worst = gate
        name = k[1] if k[0] != "stock" else "stock"
        fmt = lambda v: "-" if v is None or v < 0 else f"{v:.1f}"
        fp = lambda v: "-" if v is None else f"{v:+.2f}%"
        if a.markdown:
            print(f"| {name} | {k[2]} | {k[3]} | {fmt(x['us_per_step'])} | {fmt(y['us_per_step'])} | {fp(d)} | "
                  f"{fmt(x.get('dev_us'))} | {fmt(y.get('dev_us'))} | {fp(dd)} |")
        else:
            print(f"{name:<24.24} {k[2]:>7} {k[3]:>5} {fmt(x['us_per_step']):>9} {fmt(y['us_per_step']):>9} "
                  f"{fp(d):>8} {fmt(x.get('dev_us')):>10} {fmt(y.get('dev_us')):>10} {fp(dd):>8}")
    if a.max_pct is not None and worst is not None and worst > a.max_pct:
        print(f"compare.py: a row is {worst:+.2f}% slower, over --max-pct {a.max_pct}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
