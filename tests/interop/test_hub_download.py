#!/usr/bin/env python3
"""`mtpq download` against the project's fake Hub (tests/fakehub, loopback).

- faults survived: two 503s and a 429 (RateLimit r=0) on the API, a connection cut mid-body (resumed
  with Range), a store that ignores Range (the file restarts), a 2-entry
  tree page size (Link rel="next" pagination);
- files byte-identical to the source; the token never reaches the store;
- the cache is the huggingface_hub layout: the official client (PyPI) reads
  it offline, and mtpq's cache equals the one the official client writes
  when it downloads the same repo (same blobs, links and refs);
- a partial blob from an earlier run is resumed (bytes fetched asserted);
- progress on a TTY (under script(1)): byte progress of a throttled LFS
  download shows intermediate percentages and ends at 100%;
- --include; HF_HUB_OFFLINE; exit codes: bad token 7, missing repo 8,
  corrupted LFS bytes 8 with nothing left in blobs/, no server 6;
- a renamed repo (relative 307 on every endpoint) is followed, with the
  token kept on the same host.
- `mtpq inspect org/model` fetches config, index and each shard's header
  only (byte count asserted) and prints what a local inspect prints.
- `mtpq quantize org/target` from the fake Hub (the tiny model, shards as
  LFS files) fetches the small files, each shard's header and only the
  wanted tensors' byte ranges (the byte count is asserted exactly against
  one made here from the headers) and writes the same repo as a local run;
  a second run reuses the fetched tensors.
- each shard is resolved once (a HEAD) and its signed URL reused for every
  range; -v prints the cut connection's retry; a signed URL the store
  refuses as expired (403) is resolved again and the fetch completes, and
  one about to expire is resolved again before the request;
  quantize's fetch shows bytes, rate and time left on a terminal.
- `mtpq upload` to the fake Hub backed by moto's S3 (PyPI; presigned PUTs,
  multipart with 5 MiB parts and real ETags; a 503 on the API and a 500 on a
  store PUT): the official client downloads identical files; the token never
  reaches the store or the multipart completion; an unchanged rerun makes no
  commit; the official client's upload_folder is fetched identically by
  `mtpq download`; no token exits 7.
- with the built-in store: a commit refused with 412 is reported (exit 8)
  and the rerun completes without re-sending any object; a per-object LFS
  batch error plus a connection cut mid-PUT: the other object is still
  uploaded (the cut PUT retried), exit 8 names the refused file, nothing is
  committed, and the rerun sends only the refused object; a token that may
  not create repos (403 on create) still uploads to an existing repo, and
  exits 7 for a missing one.
Usage: test_hub_download.py MTPQ TESTDATA
"""
import collections
import filecmp
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

MTPQ, TESTDATA = sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKEHUB = os.path.join(HERE, "..", "fakehub", "fakehub.py")
failures = []


def check(c, m):
    if not c:
        failures.append(m)


try:
    import huggingface_hub  # noqa: F401
except ImportError:
    print("skip: huggingface_hub is not installed")
    sys.exit(77)


def start(src, *extra, log=None):
    cmd = [sys.executable, FAKEHUB, "--repo", "org/model=" + src, *extra]
    if log:
        cmd += ["--log", log]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    ports = json.loads(p.stdout.readline())
    return p, ports


def mtpq(env, *a):
    return subprocess.run([MTPQ, "download", *a], capture_output=True, text=True, env=env)


def tree(root):
    """path -> (is_link, link target or size) for every entry under root"""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(".locks") or n == "CACHEDIR.TAG" or rel.startswith("models--org--model/trees") \
                    or rel.startswith("models--org--model/.no_exist"):
                continue
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else ("file", os.path.getsize(p))
    return out


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "src")
    os.makedirs(os.path.join(src, "sub", "dir"))
    files = {"config.json": b'{"model_type": "qwen3_next"}\n', "sub/dir/notes.txt": b"hello\n",
             "model.safetensors": os.urandom(300_000), "big.bin": os.urandom(2_000_000)}
    for k, v in files.items():
        open(os.path.join(src, k), "wb").write(v)
    log = os.path.join(tmp, "hub.log")
    srv, ports = start(src, "--token", "hf_secret", "--api-503", "2", "--api-429", "1", "--cut", "1",
                       "--ignore-range", "1", "--rename", "org/old-name=org/model",
                       "--page-size", "2", log=log)
    try:
        base = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_TOKEN="hf_secret",
                    MTPQ_HUB_BACKOFF_S="0.01", HF_HUB_DISABLE_XET="1")
        base.pop("HF_HUB_OFFLINE", None)
        cache = os.path.join(tmp, "cache")
        env = dict(base, HF_HUB_CACHE=cache)
        p = mtpq(env, "org/model", "--json")
        check(p.returncode == 0, f"download rc {p.returncode}: {p.stderr}")
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        snap = r.get("snapshot", "")
        for k, v in files.items():
            q = os.path.join(snap, k)
            check(os.path.islink(q) and open(q, "rb").read() == v, f"{k}: not a link to identical bytes")
        check(r.get("files") == 4 and r.get("fetched") == 4, f"files/fetched: {r}")
        reqs = [json.loads(l) for l in open(log)]
        check(not any(x["auth"] for x in reqs if x["server"] == "store"), "the token was sent to the object store")
        check(sum(1 for x in reqs if x["status"] == 503) == 2, "the two 503s were not retried")
        check(sum(1 for x in reqs if x["status"] == 429) == 1, "the 429 was not retried")
        check(any(x["status"] == "cut" for x in reqs), "no cut connection was injected")
        check(any(x["server"] == "store" and x["range"] and x["status"] == 206 for x in reqs) or
              any(x["server"] == "store" and x["range"] and x["status"] == 200 for x in reqs),
              "the cut download was not resumed with Range")
        check(not any(n.endswith(".incomplete") for n in os.listdir(os.path.join(cache, "models--org--model", "blobs"))),
              "an .incomplete file remains")
        # a rerun fetches nothing
        p = mtpq(env, "org/model", "--json")
        check(p.returncode == 0 and json.loads(p.stdout)["fetched"] == 0, f"rerun fetched again: {p.stdout} {p.stderr}")
        # the official client reads mtpq's cache offline
        code = ("import sys; from huggingface_hub import snapshot_download, hf_hub_download; "
                "print(snapshot_download('org/model', cache_dir=sys.argv[1])); "
                "print(hf_hub_download('org/model', 'sub/dir/notes.txt', cache_dir=sys.argv[1]))")
        o = subprocess.run([sys.executable, "-c", code, cache], capture_output=True, text=True,
                           env=dict(base, HF_HUB_OFFLINE="1"))
        check(o.returncode == 0 and o.stdout.split("\n")[0] == snap, f"huggingface_hub offline: {o.stdout} {o.stderr}")
        # the official client's own cache of the same repo has the same blobs, links and refs
        ocache = os.path.join(tmp, "official")
        o = subprocess.run([sys.executable, "-c", "import sys; from huggingface_hub import snapshot_download; "
                            "print(snapshot_download('org/model', cache_dir=sys.argv[1]))", ocache],
                           capture_output=True, text=True, env=base)
        check(o.returncode == 0, f"official download from the fake hub: {o.stderr[-2000:]}")
        if o.returncode == 0:
            a, b = tree(cache), tree(ocache)
            check(len(a) == 9 and a == b, f"cache layouts differ:\n mtpq {sorted(a.items())}\n hfh  {sorted(b.items())}")
        # --include only
        c2 = os.path.join(tmp, "c2")
        p = mtpq(dict(base, HF_HUB_CACHE=c2), "org/model", "--include", "*.json", "--include", "sub/*", "--json")
        r2 = json.loads(p.stdout) if p.returncode == 0 else {}
        check(r2.get("files") == 2 and sorted(os.listdir(r2.get("snapshot", tmp))) == ["config.json", "sub"],
              f"--include: {p.stdout} {p.stderr}")
        # resume a partial blob left by an earlier run
        c3 = os.path.join(tmp, "c3")
        import hashlib
        sha = hashlib.sha256(files["big.bin"]).hexdigest()
        blobs = os.path.join(c3, "models--org--model", "blobs")
        os.makedirs(blobs)
        open(os.path.join(blobs, sha + ".incomplete"), "wb").write(files["big.bin"][:1_500_000])
        p = mtpq(dict(base, HF_HUB_CACHE=c3), "org/model", "--include", "big.bin", "--json")
        r3 = json.loads(p.stdout) if p.returncode == 0 else {}
        check(r3.get("bytes_fetched") == 500_000, f"resume fetched {r3.get('bytes_fetched')} bytes, expected 500000")
        check(open(os.path.join(r3.get("snapshot", tmp), "big.bin"), "rb").read() == files["big.bin"]
              if r3 else False, "resumed file differs")
        # offline: served from the cache, no request
        p = mtpq(dict(env, HF_HUB_OFFLINE="1"), "org/model")
        check(p.returncode == 0 and p.stdout.strip() == snap, f"offline: {p.returncode} {p.stdout} {p.stderr}")
        p = mtpq(dict(base, HF_HUB_CACHE=os.path.join(tmp, "empty"), HF_HUB_OFFLINE="1"), "org/model")
        check(p.returncode == 6 and "HF_HUB_OFFLINE" in p.stderr, f"offline, not cached: {p.returncode} {p.stderr}")
        # the token from $HF_HOME/token (whitespace trimmed) when HF_TOKEN is unset
        home = os.path.join(tmp, "hfhome")
        os.makedirs(home)
        open(os.path.join(home, "token"), "w").write("  hf_secret\n")
        tenv = {k: v for k, v in base.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
        p = mtpq(dict(tenv, HF_HOME=home), "org/model", "--include", "config.json")
        check(p.returncode == 0 and p.stdout.startswith(os.path.join(home, "hub")), f"token file: {p.returncode} {p.stderr}")
        # errors: bad token (auth, 7; never echoed), missing repo (server, 8)
        p = mtpq(dict(base, HF_TOKEN="hf_wrong", HF_HUB_CACHE=os.path.join(tmp, "c4")), "org/model")
        check(p.returncode == 7 and "hf_wrong" not in p.stderr, f"bad token: {p.returncode} {p.stderr}")
        p = mtpq(dict(base, HF_HUB_CACHE=os.path.join(tmp, "c4")), "org/missing")
        check(p.returncode == 8 and "RepoNotFound" in p.stderr, f"missing repo: {p.returncode} {p.stderr}")
        p = mtpq(dict(base, HF_HUB_CACHE=os.path.join(tmp, "c4")), "not-a-repo-id")
        check(p.returncode == 2, f"bad repo id: {p.returncode} {p.stderr}")
        # a renamed repo: relative 307s followed on the same host, token kept
        open(log, "w").close()
        p = mtpq(dict(base, HF_HUB_CACHE=os.path.join(tmp, "c7")), "org/old-name", "--json")
        r7 = json.loads(p.stdout) if p.returncode == 0 else {}
        check(r7.get("files") == 4 and all(open(os.path.join(r7["snapshot"], k), "rb").read() == v
                                           for k, v in files.items()), f"renamed repo: {p.returncode} {p.stderr}")
        reqs = [json.loads(l) for l in open(log)]
        moved = [x for x in reqs if x["status"] == 307]
        check(len(moved) >= 3 and all(x["auth"] for x in reqs if x["server"] == "hub"),
              f"relative redirects: {len(moved)} 307s; every hub request must carry the token")
    finally:
        srv.kill()
        srv.wait()
    # corrupted LFS bytes: refused, nothing left in blobs/
    srv, ports = start(src, "--corrupt", "model.safetensors")
    try:
        c5 = os.path.join(tmp, "c5")
        p = mtpq(dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_HUB_CACHE=c5,
                      MTPQ_HUB_BACKOFF_S="0.01"), "org/model", "--include", "model.safetensors")
        check(p.returncode == 8 and "sha256" in p.stderr, f"corrupt: {p.returncode} {p.stderr}")
        bd = os.path.join(c5, "models--org--model", "blobs")
        check(not os.path.isdir(bd) or os.listdir(bd) == [], f"corrupt: blobs/ holds {os.listdir(bd)}")
    finally:
        srv.kill()
        srv.wait()
    # byte progress on a terminal (script(1) gives mtpq a pty): 2 MB at ~4 MB/s
    if shutil.which("script"):
        srv, ports = start(src, "--throttle", "4000")
        try:
            c8 = os.path.join(tmp, "c8")
            inner = " ".join(["env", f"HF_ENDPOINT=http://127.0.0.1:{ports['hub']}", f"HF_HUB_CACHE={c8}", MTPQ,
                              "download", "org/model", "--include", "big.bin"])
            ts = os.path.join(tmp, "typescript")
            p = subprocess.run(["script", "-qec", inner, ts], capture_output=True, text=True)
            out = open(ts, errors="replace", newline="").read()
            pcts = [float(x.split("%")[0].split()[-1]) for x in out.split("\r") if "% of" in x]
            check(p.returncode == 0 and pcts and pcts[-1] == 100.0 and any(0 < v < 100 for v in pcts),
                  f"tty progress: rc {p.returncode}, percentages {pcts}")
        finally:
            srv.kill()
            srv.wait()
    # a signed URL the store refuses (403 "Request has expired") is resolved again and the fetch goes on
    srv, ports = start(os.path.join(TESTDATA, "tiny-qwen3next", "model"), "--expired", "1", log=os.path.join(tmp, "x.log"))
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_HUB_CACHE=os.path.join(tmp, "c9"),
                   MTPQ_HUB_BACKOFF_S="0.01")
        p = subprocess.run([MTPQ, "inspect", "-v", "org/model"], capture_output=True, text=True, env=env)
        heads = collections.Counter(json.loads(l)["path"] for l in open(os.path.join(tmp, "x.log"))
                                    if json.loads(l)["method"] == "HEAD")
        check(p.returncode == 0 and "resolving again" in p.stderr and sorted(heads.values()) == [1, 2],
              f"expired signed URL: rc {p.returncode}, HEADs {dict(heads)}, {p.stderr[-300:]}")
    finally:
        srv.kill()
        srv.wait()
    # a shard whose wanted tensors overlap is refused before anything is kept (each byte is fetched once)
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    shutil.copy(os.path.join(TESTDATA, "tiny-qwen3next", "model", "config.json"), bad)
    hdr = json.dumps({"mtp.a.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [0, 128]},
                      "mtp.b.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [64, 192]},
                      "lm_head.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [192, 200]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    open(os.path.join(bad, "model.safetensors"), "wb").write(struct.pack("<Q", len(hdr)) + hdr + bytes(200))
    srv, ports = start(bad)
    try:
        cache = os.path.join(tmp, "c11")
        p = subprocess.run([MTPQ, "quantize", "org/model", "--vocab", "x.safetensors", "--expert-input-scale", "0.1",
                            "--out", os.path.join(tmp, "badq")], capture_output=True, text=True,
                           env=dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_HUB_CACHE=cache))
        left = glob.glob(os.path.join(cache, ".mtpq-partial", "*", "*"))
        check(p.returncode == 4 and "mtp.a.weight and mtp.b.weight overlap" in p.stderr and not left,
              f"overlapping tensors: rc {p.returncode}, {p.stderr[-200:]}, left {left}")
    finally:
        srv.kill()
        srv.wait()
    # a signed URL about to expire (the store states 20 s; mtpq keeps a 30 s margin) is resolved again before each
    # request instead of failing: as many HEADs as ranged GETs, and the same report
    srv, ports = start(os.path.join(TESTDATA, "tiny-qwen3next", "model"), "--url-ttl", "20",
                       log=os.path.join(tmp, "ttl.log"))
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_HUB_CACHE=os.path.join(tmp, "c12"))
        p = subprocess.run([MTPQ, "inspect", "org/model"], capture_output=True, text=True, env=env)
        reqs = [json.loads(l) for l in open(os.path.join(tmp, "ttl.log"))]
        heads = sum(1 for x in reqs if x["method"] == "HEAD")
        ranged = sum(1 for x in reqs if x["server"] == "store" and x["range"] and x["status"] == 206)
        check(p.returncode == 0 and "mtp" in p.stdout and heads == ranged == 4,
              f"expiring signed URLs: rc {p.returncode}, {heads} HEADs, {ranged} ranged GETs, {p.stderr[-300:]}")
    finally:
        srv.kill()
        srv.wait()
    # quantize's fetch on a terminal: bytes, rate and time left
    if shutil.which("script"):
        srv, ports = start(os.path.join(TESTDATA, "tiny-qwen3next", "model"), "--throttle", "20000")
        try:
            ids = os.path.join(tmp, "pids")
            subprocess.run([MTPQ, "build-vocab", "--tokenizer", os.path.join(TESTDATA, "tiny-qwen3next", "model",
                                                                             "tokenizer.json"),
                            "--counts", os.path.join(TESTDATA, "tiny-qwen3next", "counts", "code_train.tsv"),
                            "--size", "98304", "--out", ids], check=True, capture_output=True)
            inner = " ".join(["env", f"HF_ENDPOINT=http://127.0.0.1:{ports['hub']}",
                              f"HF_HUB_CACHE={os.path.join(tmp, 'c10')}", MTPQ, "quantize", "org/model", "--vocab",
                              ids + ".safetensors", "--expert-input-scale", "0.1667", "--out",
                              os.path.join(tmp, "ttyq")])
            ts = os.path.join(tmp, "typescript2")
            p = subprocess.run(["script", "-qec", inner, ts], capture_output=True, text=True)
            lines = [x for x in open(ts, errors="replace", newline="").read().split("\r") if "fetching" in x]
            check(p.returncode == 0 and len(lines) >= 2 and any("MB/s, " in x and " s left" in x for x in lines)
                  and "(100.0%)" in lines[-1], f"quantize tty progress: rc {p.returncode}, {lines[:2]} .. {lines[-1:]}")
        finally:
            srv.kill()
            srv.wait()
    port = ports["hub"]  # the server is gone: connection refused
    p = mtpq(dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=os.path.join(tmp, "c6"),
                  MTPQ_HUB_BACKOFF_S="0.001"), "org/model")
    check(p.returncode == 6, f"no server: {p.returncode} {p.stderr}")


def fetched_bytes(log):
    """body bytes the fake Hub served: /resolve/ GETs and everything from the store"""
    reqs = [json.loads(x) for x in open(log)]
    return sum(x["bytes"] for x in reqs if x["method"] == "GET" and "/resolve/" in x["path"] or x["server"] == "store")


def wants(name):  # the drafter's tensors (the tiny model: tied head, no input_scale)
    return name.startswith("mtp.") or name.startswith("lm_head.") or name == "model.embed_tokens.weight"


with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(TESTDATA, "tiny-qwen3next", "model")
    log = os.path.join(tmp, "hub.log")
    srv, ports = start(model, "--cut", "1", log=log)
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_HUB_CACHE=os.path.join(tmp, "c"),
                   MTPQ_HUB_BACKOFF_S="0.01")
        env.pop("HF_TOKEN", None)
        ids = os.path.join(tmp, "ids")
        p = subprocess.run([MTPQ, "build-vocab", "--tokenizer", os.path.join(model, "tokenizer.json"), "--counts",
                            os.path.join(TESTDATA, "tiny-qwen3next", "counts", "code_train.tsv"), "--size", "98304",
                            "--out", ids], capture_output=True, text=True)
        check(p.returncode == 0, f"build-vocab: {p.stderr}")
        q = [MTPQ, "quantize", "--vocab", ids + ".safetensors", "--expert-input-scale", "0.1667"]
        local, remote = os.path.join(tmp, "local"), os.path.join(tmp, "remote")
        p = subprocess.run(q + [model, "--out", local], capture_output=True, text=True)
        check(p.returncode == 0, f"local quantize: {p.stderr}")
        open(log, "w").close()
        p = subprocess.run(q + ["-v", "org/model", "--out", remote], capture_output=True, text=True, env=env)
        check(p.returncode == 0 and "fetched" in p.stderr, f"hub quantize: {p.returncode} {p.stderr}")
        # -v: the cut connection's retry is a line of its own
        check("retry 1 of 5" in p.stderr, f"hub quantize -v: no retry line: {p.stderr}")
        if p.returncode == 0:  # the card names the Hub repo, the manifest its commit
            card = open(os.path.join(remote, "README.md")).read()
            man = json.load(open(os.path.join(remote, "mtpq_manifest.json")))
            check("\nbase_model: org/model\n" in card and "vllm serve org/model " in card,
                  f"hub quantize's card: {card[:300]}")
            rev = man["target"]["revision"]
            check(man["target"]["base_model"] == "org/model" and isinstance(rev, str) and len(rev) == 40,
                  f"hub quantize's manifest: {man['target']}")
        got = fetched_bytes(log)
        want, repo = 0, 0
        small = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "model.safetensors.index.json"}
        for f in sorted(os.listdir(model)):
            size = os.path.getsize(os.path.join(model, f))
            repo += size
            if f in small:
                want += size
            elif f.endswith(".safetensors"):
                with open(os.path.join(model, f), "rb") as fp:
                    n = struct.unpack("<Q", fp.read(8))[0]
                    h = json.loads(fp.read(n))
                want += 8 + n + sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()
                                    if k != "__metadata__" and wants(k))
        # the cut connection re-sends from where it broke: no byte twice
        print(f"hub quantize: fetched {got} of {repo} bytes (expected {want})")
        check(got == want, f"fetched {got} bytes from the fake hub, expected exactly {want} (repo {repo})")
        check(want < repo, f"nothing saved: {want} of {repo}")
        trees = sum(1 for l in open(log) if "/tree/" in json.loads(l)["path"])
        check(trees == 1, f"the tree was listed {trees} times in one hub quantize")
        heads = [json.loads(l)["path"] for l in open(log) if json.loads(l)["method"] == "HEAD"]
        check(len(heads) == len(set(heads)) == 2, f"each shard resolved once: {heads}")
        # the official client still reads the cache a partial fetch wrote: the small files offline, a clean scan
        code = ("import sys; from huggingface_hub import hf_hub_download, scan_cache_dir; "
                "print(hf_hub_download('org/model', 'config.json', cache_dir=sys.argv[1])); "
                "r = [x for x in scan_cache_dir(sys.argv[1]).repos if x.repo_id == 'org/model'][0]; "
                "print(sorted(f.file_name for rv in r.revisions for f in rv.files))")
        o = subprocess.run([sys.executable, "-c", code, env["HF_HUB_CACHE"]], capture_output=True, text=True,
                           env=dict(os.environ, HF_HUB_OFFLINE="1"))
        check(o.returncode == 0 and "config.json" in o.stdout.split("\n")[1]
              and not any(f.endswith(".safetensors") for f in eval(o.stdout.split("\n")[1] or "[]")),
              f"huggingface_hub on the partial fetch's cache: {o.stdout} {o.stderr[-500:]}")
        p = subprocess.run([MTPQ, "verify-bitexact", local, remote], capture_output=True, text=True)
        check(p.returncode == 0, f"hub vs local repo: {p.stdout[-500:]} {p.stderr}")
        for f in sorted(os.listdir(local)):
            if f.endswith(".safetensors"):
                check(open(os.path.join(local, f), "rb").read() == open(os.path.join(remote, f), "rb").read(),
                      f"{f}: hub and local bytes differ")
        open(log, "w").close()
        shutil.rmtree(remote)
        p = subprocess.run(q + ["org/model", "--out", remote], capture_output=True, text=True, env=env)
        fetched = [json.loads(l) for l in open(log) if json.loads(l)["server"] == "store"]
        check(p.returncode == 0 and "already fetched" in p.stderr and not fetched,
              f"second hub quantize: {p.returncode} {p.stderr} {len(fetched)} store requests")
        # offline (HF_HUB_OFFLINE=1, and an endpoint that refuses connections): quantize org/model resolves
        # refs/main from the cache and reads mtpq's fetch; a whole snapshot (huggingface_hub's download) serves
        # too; with nothing cached the error names what is missing (exit 6); no request reaches the Hub
        off = dict(env, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
        open(log, "w").close()
        shutil.rmtree(remote)
        p = subprocess.run(q + ["org/model", "--out", remote], capture_output=True, text=True, env=off)
        check(p.returncode == 0 and os.path.exists(os.path.join(remote, "mtpq_manifest.json")),
              f"offline hub quantize from mtpq's fetch: {p.returncode} {p.stderr}")
        snap_cache = os.path.join(tmp, "snapcache")
        rd = os.path.join(snap_cache, "models--org--model")
        os.makedirs(os.path.join(rd, "refs"))
        open(os.path.join(rd, "refs", "main"), "w").write(rev)
        shutil.copytree(model, os.path.join(rd, "snapshots", rev))
        p = subprocess.run([MTPQ, "inspect", "org/model"], capture_output=True, text=True,
                           env=dict(off, HF_HUB_CACHE=snap_cache))
        check(p.returncode == 0 and "mtp" in p.stdout, f"offline inspect from a whole snapshot: {p.returncode} {p.stderr}")
        p = subprocess.run([MTPQ, "inspect", "org/model"], capture_output=True, text=True,
                           env=dict(off, HF_HUB_CACHE=os.path.join(tmp, "nothing")))
        check(p.returncode == 6 and "HF_HUB_OFFLINE" in p.stderr and "refs/main" in p.stderr,
              f"offline, nothing cached: {p.returncode} {p.stderr}")
        check(not any(json.loads(l)["server"] in ("hub", "store") for l in open(log)), "an offline run made a request")
        # inspect over Range: config, index and headers only; same report as a local inspect
        open(log, "w").close()
        p = subprocess.run([MTPQ, "inspect", "--json", "org/model"], capture_output=True, text=True,
                           env=dict(env, HF_HUB_CACHE=os.path.join(tmp, "ci")))
        l = subprocess.run([MTPQ, "inspect", "--json", model], capture_output=True, text=True)
        check(p.returncode == 0 and l.returncode == 0, f"hub inspect: {p.returncode} {p.stderr}")
        if p.returncode == 0 and l.returncode == 0:
            a, b = json.loads(p.stdout), json.loads(l.stdout)
            a.pop("path", None), b.pop("path", None)
            check(a == b, "hub inspect and local inspect differ")
        got = fetched_bytes(log)
        hdrs = sum(8 + struct.unpack("<Q", open(os.path.join(model, f), "rb").read(8))[0]
                   for f in os.listdir(model) if f.endswith(".safetensors"))
        iwant = hdrs + sum(os.path.getsize(os.path.join(model, f)) for f in ("config.json", "model.safetensors.index.json"))
        print(f"hub inspect: fetched {got} of {repo} bytes (expected {iwant})")
        check(got == iwant, f"hub inspect fetched {got} bytes, expected exactly {iwant}")
    finally:
        srv.kill()
        srv.wait()


def official(code, *a, env):
    return subprocess.run([sys.executable, "-c", code, *a], capture_output=True, text=True, env=env, timeout=120)


with tempfile.TemporaryDirectory() as tmp:
    up = os.path.join(tmp, "up")
    os.makedirs(os.path.join(up, "sub"))
    os.makedirs(os.path.join(up, ".git"))
    ufiles = {"config.json": b'{"quantization_config": {}}\n', "sub/notes.txt": b"drafter\n", "empty.txt": b"",
              "small.safetensors": os.urandom(100_000), "model.safetensors": os.urandom(11_000_000)}
    for k, v in ufiles.items():
        open(os.path.join(up, k), "wb").write(v)
    open(os.path.join(up, ".git", "HEAD"), "w").write("never uploaded\n")
    log = os.path.join(tmp, "hub.log")
    srv, ports = start(os.path.join(tmp, "nothing"), "--store", "moto", "--token", "hf_w", "--api-503", "1",
                       "--put-500", "1", "--multipart-threshold", str(5 << 20), "--chunk-size", str(5 << 20), log=log)
    try:
        base = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_TOKEN="hf_w",
                    MTPQ_HUB_BACKOFF_S="0.01", HF_HUB_DISABLE_XET="1")
        base.pop("HF_HUB_OFFLINE", None)

        def upload(*a, env=base):
            return subprocess.run([MTPQ, "upload", *a], capture_output=True, text=True, env=env)

        p = upload(up, "org/drafter", "--json", "-m", "Add drafter")
        check(p.returncode == 0, f"upload rc {p.returncode}: {p.stderr}")
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        check(r.get("committed") and r.get("lfs_uploaded") == 2 and r.get("files") == 5, f"upload: {r}")
        reqs = [json.loads(l) for l in open(log)]
        check(not any(x["auth"] for x in reqs if x["server"] == "store" or x["path"].startswith("/api/complete")),
              "the token reached the store or the multipart completion")
        nparts = sum(1 for x in reqs if x["method"] == "PUT" and "partNumber=" in x["path"] and x["status"] == 200)
        check(nparts == 3, f"{nparts} multipart parts, expected ceil(11 MB / 5 MiB) = 3")
        check(any(x["status"] == 500 for x in reqs) and any(x["status"] == 503 for x in reqs), "faults not injected")
        o = official("import sys; from huggingface_hub import snapshot_download; "
                     "print(snapshot_download('org/drafter', cache_dir=sys.argv[1]))", os.path.join(tmp, "oc"), env=base)
        check(o.returncode == 0, f"official download: {o.stderr[-1500:]}")
        if o.returncode == 0:
            snap = o.stdout.strip().splitlines()[-1]
            for k, v in ufiles.items():
                check(open(os.path.join(snap, k), "rb").read() == v, f"official client got a different {k}")
            check(not os.path.exists(os.path.join(snap, ".git")), ".git was uploaded")
        open(log, "w").close()
        p = upload(up, "org/drafter", "--json")
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        puts = [x for x in map(json.loads, open(log)) if x["method"] == "PUT" or "/commit/" in x["path"]]
        check(r.get("committed") is False and r.get("unchanged") == 5 and not puts, f"unchanged rerun: {r} {puts}")
        p = upload(up, "org/drafter", env={k: v for k, v in base.items() if k != "HF_TOKEN"})
        check(p.returncode == 7, f"no token: {p.returncode} {p.stderr}")
        # the official client uploads; mtpq downloads the same bytes
        src2 = os.path.join(tmp, "src2")
        os.makedirs(src2)
        off = {"a.json": b'{"a": 2}\n', "w.safetensors": os.urandom(50_000)}
        for k, v in off.items():
            open(os.path.join(src2, k), "wb").write(v)
        o = official("import sys; from huggingface_hub import HfApi; api = HfApi(); "
                     "api.create_repo('org/official', exist_ok=True); "
                     "print(api.upload_folder(folder_path=sys.argv[1], repo_id='org/official'))", src2, env=base)
        check(o.returncode == 0, f"official upload: {o.stderr[-1500:]}")
        p = mtpq(dict(base, HF_HUB_CACHE=os.path.join(tmp, "mc")), "org/official")
        check(p.returncode == 0, f"download of the official upload: {p.stderr}")
        for k, v in off.items():
            q = os.path.join(p.stdout.strip(), k)
            check(os.path.exists(q) and open(q, "rb").read() == v, f"{k} differs after official upload")
    finally:
        srv.kill()
        srv.wait()
    # a commit refused with 412: reported, and the rerun sends no object again
    log = os.path.join(tmp, "hub2.log")
    srv, ports = start(os.path.join(tmp, "nothing"), "--token", "hf_w", "--commit-412", "1",
                       "--multipart-threshold", str(1 << 20), log=log)
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_TOKEN="hf_w",
                   MTPQ_HUB_BACKOFF_S="0.01")
        p = subprocess.run([MTPQ, "upload", up, "org/d2"], capture_output=True, text=True, env=env)
        check(p.returncode == 8 and "412" in p.stderr and "rerun" in p.stderr, f"412: {p.returncode} {p.stderr}")
        open(log, "w").close()
        p = subprocess.run([MTPQ, "upload", up, "org/d2", "--json"], capture_output=True, text=True, env=env)
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        puts = [x for x in map(json.loads, open(log)) if x["method"] == "PUT"]
        check(r.get("committed") and r.get("lfs_already_present") == 2 and r.get("lfs_uploaded") == 0 and not puts,
              f"rerun after 412: {r} {p.stderr} {len(puts)} PUTs")
    finally:
        srv.kill()
        srv.wait()
    # a per-object LFS error (the first object, model.safetensors) and a PUT cut mid-body
    log = os.path.join(tmp, "hub3.log")
    srv, ports = start(os.path.join(tmp, "nothing"), "--token", "hf_w", "--lfs-error", "1", "--cut-put", "1",
                       "--multipart-threshold", str(1 << 20), log=log)
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_TOKEN="hf_w",
                   MTPQ_HUB_BACKOFF_S="0.01")
        p = subprocess.run([MTPQ, "upload", up, "org/d3"], capture_output=True, text=True, env=env)
        reqs = [json.loads(x) for x in open(log)]
        check(p.returncode == 8 and "model.safetensors" in p.stderr and "refused" in p.stderr,
              f"per-object error: {p.returncode} {p.stderr}")
        check(any(x["status"] == "cut" for x in reqs) and any(x["method"] == "PUT" and x["status"] == 200 for x in reqs),
              "the cut PUT was not retried to completion")
        check(not any("/commit/" in x["path"] for x in reqs), "a commit was sent despite a refused object")
        open(log, "w").close()
        p = subprocess.run([MTPQ, "upload", up, "org/d3", "--json"], capture_output=True, text=True, env=env)
        r = json.loads(p.stdout) if p.returncode == 0 else {}
        puts = [x for x in map(json.loads, open(log)) if x["method"] == "PUT"]
        check(r.get("committed") and r.get("lfs_already_present") == 1 and r.get("lfs_uploaded") == 1
              and puts and all(x["path"].startswith("/part/") for x in puts),
              f"rerun after the object error: {r} {p.stderr} {[x['path'] for x in puts]}")
    finally:
        srv.kill()
        srv.wait()
    # 403 on create: the repo's info decides
    exists = os.path.join(tmp, "exists")
    os.makedirs(exists)
    open(os.path.join(exists, "README.md"), "w").write("an existing repo\n")
    srv, ports = start(exists, "--token", "hf_w", "--create-403")
    try:
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{ports['hub']}", HF_TOKEN="hf_w",
                   MTPQ_HUB_BACKOFF_S="0.01")
        p = subprocess.run([MTPQ, "upload", up, "org/model", "--json"], capture_output=True, text=True, env=env)
        check(p.returncode == 0 and json.loads(p.stdout).get("committed"), f"403 on create, repo exists: {p.stderr}")
        p = subprocess.run([MTPQ, "upload", up, "org/other"], capture_output=True, text=True, env=env)
        check(p.returncode == 7 and "403" in p.stderr, f"403 on create, no repo: {p.returncode} {p.stderr}")
    finally:
        srv.kill()
        srv.wait()

if failures:
    for m in failures:
        print("FAIL:", m)
    sys.exit(1)
print("hub download, partial quantize, upload: all checks passed")
