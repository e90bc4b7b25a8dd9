#!/usr/bin/env python3
"""The live runs side by side: outputs of stock MTP and the mtpq drafter
against vLLM's output without speculation, token for token, and vLLM's
spec-decode acceptance. Usage: compare.py OUTDIR (holding live-*.json)"""
import json
import os
import sys

o = sys.argv[1]
r = {}
for m in ("none", "stock", "mtpq"):
    p = os.path.join(o, f"live-{m}.json")
    if os.path.exists(p):
        r[m] = json.load(open(p))
if "none" not in r:
    print("compare: no run without speculation")
    sys.exit(1)
base = r["none"]["tokens"]
ok = True
for m in ("stock", "mtpq"):
    if m not in r:
        print(f"{m}: no result")
        ok = False
        continue
    x = r[m]
    same = sum(a == b for a, b in zip(x["tokens"], base))
    first = [next((i for i, (u, v) in enumerate(zip(a, b)) if u != v), None) for a, b in zip(x["tokens"], base)]
    diff = [(r["none"]["prompts"][i], f) for i, f in enumerate(first) if f is not None]
    print(f"{m}: k = {x['k']}, MAL {x.get('mean_acceptance_length', float('nan')):.3f}, per position "
          f"{' '.join('%.3f' % p for p in x.get('per_position', []))}; output equal to no speculation in "
          f"{same}/{len(base)} prompts{'; first differences ' + str(diff[:6]) if diff else ''}; "
          f"generate {x['generate_s']:.2f} s (none {r['none']['generate_s']:.2f} s)")
print(f"none: equal to the shipped traces (transformers, BF16) in {r['none']['equal_to_shipped_traces']}/{len(base)}")
# Greedy speculation emits the target's argmax at every position whatever
# was drafted, so two drafters must give the same output; where both differ
# from the run without speculation at the same positions, the target's own
# numerics differ (a verify forward of k + 1 tokens against one token a
# step, in BF16), not the drafter. That is the check: the mtpq drafter's
# output equals stock MTP's token for token.
if "stock" in r and "mtpq" in r:
    same = sum(a == b for a, b in zip(r["stock"]["tokens"], r["mtpq"]["tokens"]))
    print(f"mtpq vs stock MTP: output equal in {same}/{len(base)} prompts")
    ok = same == len(base)
sys.exit(0 if ok else 3)
