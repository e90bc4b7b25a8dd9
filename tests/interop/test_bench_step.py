#!/usr/bin/env python3
"""bench-step on the tiny model (CPU backend): the bytes-read column must
equal a count made here from the safetensors headers and config.json (every
mtp.* linear except norms and experts and the head once; per sequence top-k
experts, one embedding row, BF16 K/V of the mean attended context
ctx + (k+1)//2); rows for every context and batch; the estimate line
follows its formula; --warm-l2 accepted (the CPU has no L2 to flush);
bad options refused.
Usage: test_bench_step.py MTPQ TESTDATA
"""
import json
import os
import struct
import re
import subprocess
import sys

MTPQ, TESTDATA = sys.argv[1:3]
M = os.path.join(TESTDATA, "tiny-qwen3next", "model")
failures = []


def check(c, m):
    if not c:
        failures.append(m)


def sizes(repo):
    out = {}
    for f in os.listdir(repo):
        if f.endswith(".safetensors"):
            with open(os.path.join(repo, f), "rb") as fp:
                n = struct.unpack("<Q", fp.read(8))[0]
                h = json.loads(fp.read(n))
            for k, v in h.items():
                if k != "__metadata__":
                    out[k] = v["data_offsets"][1] - v["data_offsets"][0]
    return out


cfg = json.load(open(os.path.join(M, "config.json")))
H, nkv, D, topk = cfg["hidden_size"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_experts_per_tok"]
sz = sizes(M)
dense = sum(v for k, v in sz.items() if k.startswith("mtp.") and "norm" not in k and ".experts." not in k)
expert = sum(v for k, v in sz.items() if k.startswith("mtp.") and ".experts.0." in k)
head = sz["lm_head.weight"] if "lm_head.weight" in sz else sz["model.embed_tokens.weight"]


K = 3


def expect(ctx, b):
    return dense + head + b * (topk * expert + 2 * H + (ctx + (K + 1) // 2) * 2 * nkv * D * 2)


ctxs, bats = (16, 100), (1, 3)
p = subprocess.run([MTPQ, "bench-step", "--target", M, "--backend", "cpu", "--iters", "3", "-k", str(K),
                    "--context", str(ctxs[0]), "--context", str(ctxs[1]), "--batch", "1", "--batch", "3",
                    "--target-step-ms", "20", "--mal", "2.5"],
                   capture_output=True, text=True)
check(p.returncode == 0, f"bench-step rc {p.returncode}: {p.stderr}")
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("stock")]
hm = re.search(r"HBM read (\d+) GB/s", p.stdout)
check(hm is not None, f"no HBM rate in the header: {p.stdout}")
hbm = float(hm.group(1)) if hm else 1.0
check(len(rows) == 4, f"expected 4 stock rows, got {p.stdout}")
want_rows = [(c, b) for c in ctxs for b in bats]
for (ctx, b), r in zip(want_rows, rows):
    # "stock (target mtp.*) CTX BATCH US MB GBS PCT FLOOR XFLOOR SPEEDUP DRAFTS/S"
    got_ctx, got_b, us, mb, dps = int(r[3]), int(r[4]), float(r[5]), float(r[6]), float(r[12])
    # x floor = us / floor, floor = bytes / HBM (the header's GB/s; floor's printed 0.1 us is too coarse here)
    xfloor, want = float(r[10]), us / (mb * 1e3 / hbm)
    check(abs(xfloor - want) <= 0.01 + 0.01 * want, f"context {ctx} batch {b}: x floor {xfloor}, expected {want:.2f}")
    check((got_ctx, got_b) == (ctx, b), f"row {got_ctx},{got_b} != {ctx},{b}")
    check(abs(mb - expect(ctx, b) / 1e6) < 0.006, f"context {ctx} batch {b}: {mb} MB read, "
          f"expected {expect(ctx, b) / 1e6:.4f}")
    check(us > 0 and abs(dps - b / (us / 1e6)) <= 1 + 1e-3 * dps, f"context {ctx}: {us} us, {dps} drafts/s")
    # the device-time columns: none on the CPU backend
    check(r[13:] == ["-", "-"], f"context {ctx} batch {b}: device columns {r[13:]}, expected '-' '-' on the CPU")
est = [l for l in p.stdout.splitlines() if "est. decode" in l]
check(len(est) == 4, f"expected 4 estimate lines: {p.stdout}")
for l, r in zip(est, rows):
    tps = float(l.split("est. decode")[1].split()[0])
    want = 2.5 * 1e3 / (20 + K * float(r[5]) / 1e3)
    check(abs(tps - want) < 0.1 + 1e-3 * want, f"estimate {tps} != {want:.1f}")
# the CPU backend has no L2 to flush: its header says nothing of it, and --warm-l2 changes nothing it prints
check("L2" not in p.stdout.splitlines()[0], f"CPU header mentions L2: {p.stdout.splitlines()[0]}")
p = subprocess.run([MTPQ, "bench-step", "--target", M, "--backend", "cpu", "--iters", "2", "--context", "16",
                    "--warm-l2"], capture_output=True, text=True)
check(p.returncode == 0 and len([l for l in p.stdout.splitlines() if l.startswith("stock")]) == 1,
      f"--warm-l2 on the CPU: rc {p.returncode} {p.stdout} {p.stderr}")
# --json: the same rows as the table, the run's settings, and compare.py reads two of them
pj = subprocess.run([MTPQ, "bench-step", "--target", M, "--backend", "cpu", "--iters", "2", "--context", "16",
                     "--batch", "1", "--batch", "3", "--json", "--target-step-ms", "20", "--mal", "2.5"],
                    capture_output=True, text=True)
check(pj.returncode == 0, f"--json rc {pj.returncode}: {pj.stderr}")
try:
    j = json.loads(pj.stdout)
except ValueError as e:
    j = {"rows": []}
    check(False, f"--json output is not JSON ({e}): {pj.stdout[:200]}")
check(j.get("backend") == "cpu" and j.get("k") == K and j.get("iters") == 2, f"--json header: {j}")
jr = j["rows"]
check([(r["kind"], r["context"], r["batch"]) for r in jr] == [("stock", 16, 1), ("stock", 16, 3)], f"rows {jr}")
for r in jr:
    check(abs(r["bytes"] - expect(r["context"], r["batch"])) < 6000, f"--json bytes {r['bytes']}")
    check(abs(r["x_floor"] - r["us_per_step"] / r["floor_us"]) < 1e-6 and r["dev_us"] == -1, f"--json row {r}")
    check(abs(r["est_tokens_per_s"] - 2.5e3 / (20 + K * r["us_per_step"] / 1e3)) < 1e-6, f"--json estimate {r}")
jp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"mtpq-bs-{os.getpid()}.json")
with open(jp, "w") as f:
    f.write(pj.stdout)
cmp = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench",
                      "compare.py"), jp, jp, "--max-pct", "0"], capture_output=True, text=True)
os.unlink(jp)
check(cmp.returncode == 0 and "+0.00%" in cmp.stdout, f"compare.py of a result with itself: {cmp.stdout} {cmp.stderr}")
p = subprocess.run([MTPQ, "bench-step", "--target", M, "--json", "--profile"], capture_output=True, text=True)
check(p.returncode == 2 and "--profile" in p.stderr, f"--json --profile: rc {p.returncode} {p.stderr}")
for bad, rc in ((["--backend", "tpu"], 2), (["--target-step-ms", "5"], 2), (["--iters", "0"], 2),
                (["--batch", "9"], 2), (["-k", "0"], 2)):
    p = subprocess.run([MTPQ, "bench-step", "--target", M, *bad], capture_output=True, text=True)
    check(p.returncode == rc and "bench-step" in p.stderr, f"{bad}: rc {p.returncode} {p.stderr.strip()}")
if failures:
    for m in failures:
        print("FAIL:", m)
    sys.exit(1)
print("bench-step: all checks passed")
