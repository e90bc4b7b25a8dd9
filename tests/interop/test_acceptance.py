#!/usr/bin/env python3
"""bench-acceptance end to end on the tiny model's traces.

The stock drafter's numbers must equal the independent PyTorch replay of
the same loop (testdata/runtime/replay_ref.json, made with transformers'
Qwen3-Next modules on the GPU machine): drafts, accepted and reached counts
per position and domain. The quantized drafter from `mtpq quantize` is
reported next to stock with the JSON contract's fields; the SVG plot is
well-formed; the drafter timing (step, catch-up, round, tokens/s) is
reported and consistent; mismatched traces, a drafter from another target
and k < 1 are refused.
Usage: test_acceptance.py MTPQ GEN_FIXTURE TESTDATA
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

MTPQ, GEN, TESTDATA = sys.argv[1:4]
T = os.path.join(TESTDATA, "tiny-qwen3next")
failures = []


def check(c, m):
    if not c:
        failures.append(m)


def run(*a):
    return subprocess.run([MTPQ, *a], capture_output=True, text=True)


ref = json.load(open(os.path.join(TESTDATA, "runtime", "replay_ref.json")))
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.time()
    p = run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces", os.path.join(T, "traces.safetensors"),
            "-k", "3", "--json")
    stock_s = time.time() - t0
    check(p.returncode == 0, p.stderr)
    rep = json.loads(p.stdout)
    d0 = rep["drafters"][0]
    check(rep["k"] == 3 and d0["kind"] == "stock", "contract")
    for dom, r in ref["domains"].items():
        got = d0["domains"][dom]
        check(got["drafts"] == r["drafts"], f"{dom}: drafts {got['drafts']} vs torch {r['drafts']}")
        want_pp = [a / r["drafts"] for a in r["accepted"]]
        want_c = [a / n for a, n in zip(r["accepted"], r["reached"])]
        check(all(abs(x - y) < 1e-12 for x, y in zip(got["per_position"], want_pp)), f"{dom}: per_position {got['per_position']} vs {want_pp}")
        check(all(abs(x - y) < 1e-12 for x, y in zip(got["conditional"], want_c)), f"{dom}: conditional")
        check(abs(got["mean_acceptance_length"] - (1 + sum(r["accepted"]) / r["drafts"])) < 1e-12, f"{dom}: MAL")
    print(f"stock drafter replay: {stock_s:.1f} s; equals the PyTorch replay")
    # quantized drafter next to stock
    vp = os.path.join(tmp, "dv")
    run("build-vocab", "-t", os.path.join(T, "model", "tokenizer.json"), "-c", os.path.join(T, "counts", "code_train.tsv"),
        "-c", os.path.join(T, "counts", "prose_train.tsv:10"), "-n", "98304", "--out", vp)
    q = os.path.join(tmp, "q")
    p = run("quantize", os.path.join(T, "model"), "--vocab", vp + ".safetensors", "--out", q, "--expert-input-scale", "0.1667")
    check(p.returncode == 0, p.stderr)
    svg = os.path.join(tmp, "acc.svg")
    p = run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces", os.path.join(T, "traces.safetensors"),
            "--drafter", q, "--plot", svg, "--json")
    rep = json.loads(p.stdout)
    check(len(rep["drafters"]) == 2 and rep["drafters"][1]["path"] == q, "quantized drafter missing")
    for dom in ("code_heldout", "prose_heldout"):
        x = rep["drafters"][1]["domains"][dom]
        check(set(x) >= {"conditional", "per_position", "mean_acceptance_length", "drafts"} and len(x["per_position"]) == 3,
              f"{dom}: fields")
        print(f"{dom}: stock MAL {rep['drafters'][0]['domains'][dom]['mean_acceptance_length']:.4f}, "
              f"quantized {x['mean_acceptance_length']:.4f}")
    # 95% bootstrap intervals over the 24 traces; the quantized drafter's
    # difference to stock paired (the same traces): narrower than either
    # drafter's own interval, which the traces' spread dominates
    s0, s1 = rep["drafters"][0]["all"], rep["drafters"][1]["all"]
    for x in (s0, s1):
        lo, hi = x["mal_ci95"]
        check(x["traces"] == 24 and lo < x["mean_acceptance_length"] < hi and
              all(a <= p <= b for (a, b), p in zip(x["per_position_ci95"], x["per_position"])), f"intervals: {x}")
    v = s1["vs_stock"]
    check("vs_stock" not in s0 and abs(v["mal_diff"] - (s1["mean_acceptance_length"] - s0["mean_acceptance_length"])) < 1e-12
          and v["mal_diff_ci95"][0] <= v["mal_diff"] <= v["mal_diff_ci95"][1]
          and v["mal_diff_ci95"][1] - v["mal_diff_ci95"][0] < (s1["mal_ci95"][1] - s1["mal_ci95"][0]) / 3, f"vs stock: {v}")
    print(f"MAL stock {s0['mean_acceptance_length']:.4f} {s0['mal_ci95']}, quantized {s1['mean_acceptance_length']:.4f} "
          f"{s1['mal_ci95']}, difference {v['mal_diff']:+.4f} {v['mal_diff_ci95']} (paired)")
    # the card's evidence: quantize again with this report (the same bytes: the weights it measured)
    rj = os.path.join(tmp, "acc.json")
    open(rj, "w").write(p.stdout)
    check(set(rep["drafters"][1]["weights_sha256"]) == {"model.safetensors", "mtp_draft_vocab_ids.safetensors"},
          "the report records the measured weights")
    p2 = run("quantize", os.path.join(T, "model"), "--vocab", vp + ".safetensors", "--out", q, "--expert-input-scale",
             "0.1667", "--force", "--acceptance", rj)
    check(p2.returncode == 0, p2.stderr)
    card = open(os.path.join(q, "README.md")).read()
    want = (f"| all | {s0['mean_acceptance_length']:.3f} [{s0['mal_ci95'][0]:.3f}, {s0['mal_ci95'][1]:.3f}] | "
            f"{s1['mean_acceptance_length']:.3f} [{s1['mal_ci95'][0]:.3f}, {s1['mal_ci95'][1]:.3f}] | "
            f"{v['mal_diff']:+.3f} [{v['mal_diff_ci95'][0]:+.3f}, {v['mal_diff_ci95'][1]:+.3f}] |")
    check(want in card and "| code_heldout |" in card and "First drafts, teacher-forced at 2280 positions" in card,
          f"card: {want!r} not in its evidence")
    svg_text = open(svg).read()
    check("MAL difference to stock" in svg_text and svg_text.count("<circle") == 3, "plot: the difference panel "
          "(all and the two domains)")
    # first drafts, teacher-forced at every position (24 traces x 95 positions), paired with stock's
    f0, f1 = rep["drafters"][0]["first_draft"], rep["drafters"][1]["first_draft"]
    check(f0["positions"] == f1["positions"] == 24 * 95, f"first-draft positions {f0['positions']} {f1['positions']}")
    check(0 < f0["accuracy"] <= 1 and 0 < f1["accuracy"] <= 1 and 0.5 < f1["agreement_with_stock"] <= 1 and
          abs(f1["accuracy"] - f0["accuracy"] - f1["accuracy_diff_vs_stock"]) < 1e-12 and f1["accuracy_diff_ci95"] > 0,
          f"first drafts: {f0} {f1}")
    print(f"first drafts: stock right {f0['accuracy']:.4f}, quantized {f1['accuracy']:.4f}, same draft "
          f"{f1['agreement_with_stock']:.4f}, difference {f1['accuracy_diff_vs_stock']:+.4f} +- {f1['accuracy_diff_ci95']:.4f}")
    for dr in rep["drafters"]:  # drafter timing: present, positive, consistent (values are not judged)
        a = dr["all"]
        check(all(a[f] > 0 and a[f] < 1e9 for f in ("draft_step_us", "catchup_us", "round_us", "draft_tokens_per_s")),
              f"{dr['kind']}: timing fields {a}")
        check(a["round_us"] >= a["draft_step_us"], f"{dr['kind']}: a round takes at least one draft step")
        check(a["draft_tokens_per_s"] <= 1e6 / a["draft_step_us"] * (1 + 1e-9),
              f"{dr['kind']}: tokens/s counts the catch-up time too")
    # (text output; stock against itself as the drafter: every first draft the same, no difference, an interval
    # of zero width)
    p = run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces", os.path.join(T, "traces.safetensors"),
            "--drafter", os.path.join(T, "model"), "-k", "2")
    lines = p.stdout.splitlines()
    same = [l for l in lines if "the same draft as stock" in l]
    check(len(same) == 1 and "right %.4f, the same draft as stock 1.0000, accuracy vs stock +0.0000 +- 0.0000" %
          f0["accuracy"] in same[0], f"stock vs stock first drafts: {same}")
    check(p.returncode == 0 and "step us" in lines[1] and "tok/s" in lines[1], "timing columns")
    diff = [l for l in lines if "difference vs stock" in l]
    check(diff and diff[-1].rstrip().endswith("x"), f"speedup column: {diff[-1:]}")
    root = ET.parse(svg).getroot()
    check(root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2, "svg")
    # a sliding draft window changes what the drafter sees (k = 1, window 8)
    base = json.loads(run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces",
                          os.path.join(T, "traces.safetensors"), "-k", "1", "--json").stdout)
    win = json.loads(run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces",
                         os.path.join(T, "traces.safetensors"), "-k", "1", "--draft-window", "8", "--json").stdout)
    check(base["drafters"][0]["all"] != win["drafters"][0]["all"], "--draft-window 8 changed nothing")
    # refusals
    p = run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces", os.path.join(T, "traces.safetensors"), "-k", "0")
    check(p.returncode == 2, f"k=0: {p.returncode}")
    fx = os.path.join(tmp, "fx")
    subprocess.run([GEN, fx, "--hidden", "64", "--experts", "12", "--inter", "32", "--heads", "2", "--kv", "1",
                    "--head-dim", "32", "--vocab", "151936"], check=True)
    p = run("bench-acceptance", "--target", fx, "--traces", os.path.join(T, "traces.safetensors"))
    check(p.returncode == 4 and "hidden size 128 but the drafter's is 64" in p.stderr, f"hidden mismatch: {p.stderr}")
    fq = os.path.join(tmp, "fq")
    run("quantize", fx, "--vocab", vp + ".safetensors", "--out", fq, "--expert-input-scale", "0.2")
    p = run("bench-acceptance", "--target", os.path.join(T, "model"), "--traces", os.path.join(T, "traces.safetensors"),
            "--drafter", fq)
    check(p.returncode == 4 and "another target" in p.stderr, f"foreign drafter: {p.returncode} {p.stderr}")

if failures:
    for m in failures:
        print("FAIL:", m)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("bench-acceptance: all checks passed")
