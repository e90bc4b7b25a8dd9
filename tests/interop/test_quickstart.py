#!/usr/bin/env python3
"""The README's quickstart, run as written against the project's fake Hub
(tests/fakehub, loopback): the block between <!-- quickstart --> and
<!-- /quickstart --> runs in bash with `mtpq` on PATH and only its six
assignments changed (MODEL: the tiny example model served as acme/tiny-next
with an Apache-2.0 card and, as an NVFP4 release has, calibrated expert
input scales in its last trunk layer; REPO: acme/tiny-next-mtpfp8; TRAFFIC, HELDOUT,
PROMPTS: text made here from the repository's own prose and code; HF_TOKEN).

Then, from what the fake Hub holds after the block's upload:
- the card's base_model is acme/tiny-next, its license apache-2.0 (the
  target's), its serve line and title name acme/tiny-next-mtpfp8;
- the card carries the evidence: the measured acceptance table (the numbers
  of the block's acceptance.json), the draft vocabulary's provenance with
  the held-out coverage, the quantize command;
- the manifest names the target's commit and lists every file's sha256,
  README.md's included, as uploaded;
- uploading the same folder to another repo rewrites the card's id lines
  to it, says so, and keeps the manifest's digest of README.md true.
Usage: test_quickstart.py MTPQ TESTDATA README
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

MTPQ, TESTDATA, README = (os.path.abspath(x) for x in sys.argv[1:4])
FAKEHUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fakehub", "fakehub.py")
fails = 0


def check(ok, msg):
    global fails
    if not ok:
        fails += 1
        print("FAIL:", msg)


text = open(README).read()
m = re.search(r"<!-- quickstart -->\n```sh\n(.*?)```\n<!-- /quickstart -->", text, re.S)
if not m:
    print("FAIL: README.md has no quickstart block")
    sys.exit(1)
block = m.group(1)
names = ("MODEL", "REPO", "TRAFFIC", "HELDOUT", "PROMPTS")
for n in names + ("export HF_TOKEN",):
    check(re.search(rf"^{n}=", block, re.M), f"the block assigns {n}")

with tempfile.TemporaryDirectory() as tmp:
    # the target as the Hub has it: the tiny model with a card naming its license
    model = os.path.join(tmp, "tiny-next")
    shutil.copytree(os.path.join(TESTDATA, "tiny-qwen3next", "model"), model)
    open(os.path.join(model, "README.md"), "w").write("---\nlicense: apache-2.0\n---\n# tiny-next\n")
    # and, as an NVFP4 release has, the trunk experts' calibrated input_scale (quantize derives the
    # drafter's from the last trunk layer's): a shard of F32 scalars, in the index
    import numpy as np
    from safetensors.numpy import save_file
    scales = {f"model.layers.3.mlp.experts.{e}.{p}_proj.input_scale": np.array(0.05 + 0.001 * e, dtype=np.float32)
              for e in range(16) for p in ("gate", "up", "down")}
    save_file(scales, os.path.join(model, "model-scales.safetensors"))
    idx_path = os.path.join(model, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    idx["weight_map"].update({k: "model-scales.safetensors" for k in scales})
    json.dump(idx, open(idx_path, "w"))
    # inputs: prose and code of this repository (traffic), other prose and code (held out), prompts
    root = os.path.dirname(README)
    def read(*p):
        return open(os.path.join(root, *p), errors="replace").read()
    traffic = read("man", "mtpq.1") + read("kernels", "decode.c") + read("quant", "drafter_meta.c")
    heldout = read("tests", "bench", "LEDGER.md") + read("kernels", "replay.c")
    open(os.path.join(tmp, "traffic.txt"), "w").write(traffic)
    open(os.path.join(tmp, "heldout.txt"), "w").write(heldout)
    with open(os.path.join(tmp, "prompts.jsonl"), "w") as f:
        for t in (read("kernels", "sample.c")[:600], read("README.md")[:600], read("io", "util.c")[:600]):
            f.write(json.dumps({"text": t}) + "\n")
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    os.symlink(MTPQ, os.path.join(bindir, "mtpq"))

    srv = subprocess.Popen([sys.executable, FAKEHUB, "--repo", "acme/tiny-next=" + model], stdout=subprocess.PIPE,
                           text=True)
    ports = json.loads(srv.stdout.readline())
    try:
        endpoint = f"http://127.0.0.1:{ports['hub']}"
        values = {"MODEL": "acme/tiny-next", "REPO": "acme/tiny-next-mtpfp8", "TRAFFIC": "traffic.txt",
                  "HELDOUT": "heldout.txt", "PROMPTS": "prompts.jsonl"}
        run = block
        for n, v in values.items():
            run = re.sub(rf"^{n}=.*$", f"{n}={v}", run, count=1, flags=re.M)
        run = re.sub(r"^export HF_TOKEN=.*$", "export HF_TOKEN=hf_quickstart", run, count=1, flags=re.M)
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], HF_ENDPOINT=endpoint,
                   HF_HOME=os.path.join(tmp, "hf"), MTPQ_HUB_BACKOFF_S="0.01")
        for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
            env.pop(k, None)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        for f in ("traffic.txt", "heldout.txt", "prompts.jsonl"):
            shutil.copy(os.path.join(tmp, f), work)
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", run], cwd=work, env=env, capture_output=True, text=True)
        check(p.returncode == 0, f"the quickstart block: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        print(p.stdout[-1500:])

        # what the fake Hub holds now: the card and the manifest as uploaded
        def fetch(repo, name):
            with urllib.request.urlopen(f"{endpoint}/{repo}/resolve/main/{name}") as r:
                return r.read()
        card = fetch("acme/tiny-next-mtpfp8", "README.md").decode()
        man = json.loads(fetch("acme/tiny-next-mtpfp8", "mtpq_manifest.json"))
        check(re.search(r"^base_model: acme/tiny-next$", card, re.M), "card: base_model")
        check(re.search(r"^license: apache-2.0$", card, re.M), "card: the target's license")
        check(re.search(r"^# acme/tiny-next-mtpfp8: FP8/NVFP4 MTP drafter for acme/tiny-next$", card, re.M),
              "card: title names the repo")
        check('"model": "acme/tiny-next-mtpfp8"' in card and "vllm serve acme/tiny-next " in card, "card: serve line")
        acc = json.load(open(os.path.join(work, "acceptance.json")))
        s0, s1 = acc["drafters"][0]["all"], acc["drafters"][1]["all"]
        row = (f"| all | {s0['mean_acceptance_length']:.3f} [{s0['mal_ci95'][0]:.3f}, {s0['mal_ci95'][1]:.3f}] | "
               f"{s1['mean_acceptance_length']:.3f} [{s1['mal_ci95'][0]:.3f}, {s1['mal_ci95'][1]:.3f}] |")
        check("## Measured acceptance" in card and row in card, f"card: the measured acceptance ({row!r})")
        check(re.search(r"^\| traffic \| 0\.\d{4} \|$", card, re.M) and "| traffic.txt | text |" in card,
              "card: the vocabulary's provenance and held-out coverage")
        check(re.search(r"^mtpq quantize acme/tiny-next --vocab vocab.safetensors --out drafter --repo-id "
                        r"acme/tiny-next-mtpfp8 --force --acceptance acceptance.json$", card, re.M),
              "card: the command that made it")
        check(re.fullmatch(r"[0-9a-f]{40}", man["target"].get("revision") or ""), f"manifest: revision {man['target']}")
        check(man["files"]["README.md"]["sha256"] == hashlib.sha256(card.encode()).hexdigest(),
              "manifest: README.md's digest is the uploaded card's")
        # the same folder to another repo: the card's id lines follow
        p = subprocess.run(["mtpq", "upload", "drafter", "acme/other-mtpfp8"], cwd=work,
                           env=dict(env, HF_TOKEN="hf_quickstart"), capture_output=True, text=True)
        check(p.returncode == 0 and "the card's drafter id 'acme/tiny-next-mtpfp8' is now 'acme/other-mtpfp8'"
              in p.stderr, f"upload elsewhere: {p.returncode} {p.stderr}")
        card2 = fetch("acme/other-mtpfp8", "README.md").decode()
        man2 = json.loads(fetch("acme/other-mtpfp8", "mtpq_manifest.json"))
        want = card.replace("# acme/tiny-next-mtpfp8:", "# acme/other-mtpfp8:").replace(
            '"model": "acme/tiny-next-mtpfp8"', '"model": "acme/other-mtpfp8"')
        check(card2 == want and want != card, "upload elsewhere: the id lines, and only they, rewritten")
        check(man2["files"]["README.md"]["sha256"] == hashlib.sha256(card2.encode()).hexdigest(),
              "upload elsewhere: the manifest's digest of the new card")
    finally:
        srv.terminate()
        srv.wait()

print("quickstart: " + ("ok" if not fails else f"{fails} failed"))
sys.exit(1 if fails else 0)
