#!/usr/bin/env python3
"""Round trips after a kernel's wait, from its SASS (a diagnosis aid, issue 7).

Usage: cuobjdump -sass OBJ_OR_BINARY > F; python3 tests/bench/ldchain.py F [REGEX]

For each kernel whose mangled name matches REGEX: the global loads after its
griddepcontrol.wait (ACQBULK in SASS), cut into batches where an instruction
uses a register an earlier load of the batch writes (or a load reuses one).
A warp issues in order, so each batch after the first costs at least one more
memory round trip: a norm kernel of one block that reads 2,048 values per
input should show one batch. Also counted: loads that follow a store which
follows a load ("ld-st-ld"): where the compiler cannot tell the addresses
apart it keeps them in that order, so each such load waits for the stores
before it (k_attn's value row: 8 round trips in turn). This is a crude view
(a use of a predicated-off load's register counts too, and it follows the
listing, not branches).

cuobjdump comes with the CUDA toolkit on the GPU machine (device_round.sh:
MTPQ_ROUND_SASS); off it, NVIDIA's nvidia-cuda-cuobjdump wheel has one.
"""
import re
import sys


def batches(fn_text):
    """(batch sizes, ld-st-ld count) after the wait"""
    lines = [l for l in fn_text.split("\n") if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    post, pending, out, cur, order = False, set(), [], 0, []
    for l in lines:
        ins = l.split("*/", 1)[1].split(";")[0].strip()
        if "ACQBULK" in ins:
            post = True
            continue
        if not post or not ins:
            continue
        regs = re.findall(r"\bR(\d+)\b", ins)
        op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]
        if op.startswith("STG") or op.startswith("ST."):
            order.append("S")
        if op.startswith("LDG") or op.startswith("LD."):
            order.append("L")
            dst = regs[0] if regs else None
            if dst in pending:
                out.append(cur)
                cur, pending = 0, set()
            pending.add(dst)
            cur += 1
        else:
            srcs = regs if op.split(".")[0] in ("STG", "ST", "RED", "ATOM") else regs[1:]
            if any(r in pending for r in srcs):
                out.append(cur)
                cur, pending = 0, set()
    if cur:
        out.append(cur)
    return [b for b in out if b], len(re.findall(r"LS+(?=L)", "".join(order)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pat = sys.argv[2] if len(sys.argv) > 2 else "."
    for fn in open(sys.argv[1]).read().split("Function : ")[1:]:
        name = fn.split("\n", 1)[0].strip()
        if re.search(pat, name):
            b, lsl = batches(fn)
            print(f"{name[:70]:70s} {len(b):3d} batches, {lsl:2d} ld-st-ld: {b}")


if __name__ == "__main__":
    main()
