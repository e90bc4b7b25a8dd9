#!/usr/bin/env python3
"""Tokenizer parity: `mtpq tokenize` must give exactly the ids of Hugging Face
`tokenizers` (PyPI) for the same tokenizer.json, on > 1 MB of mixed text:
source code, prose, CJK, emoji (ZWJ sequences, flags, skin tones), Croatian
diacritics precomposed and decomposed (NFC), Greek/Devanagari/Arabic/Thai with
combining marks, odd whitespace (tabs, CRLF, NBSP, thin/ideographic spaces,
U+2028, VT/FF, trailing spaces, blank-line runs), contractions in every case,
digits, long runs, and special tokens embedded in the text. Plain text is
encoded as one document (mtpq streams it in pieces), JSONL per line.
Also prints tokens/s of both, single-threaded, on the same text.
Usage: test_tokenizer.py MTPQ TOKENIZER_JSON [--bench]
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

try:
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

MTPQ, TOK = sys.argv[1:3]
BENCH = "--bench" in sys.argv
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def mixed_text(seed, target):
    rng = random.Random(seed)
    parts = []
    libdir = os.path.dirname(os.__file__)
    srcs = sorted(f for f in os.listdir(libdir) if f.endswith(".py"))
    prose = ("The drafter reads every active weight once per step, so its cost is set by bytes, "
             "not by flops. We'll measure what it's worth: acceptance doesn't change, they're sure, "
             "and I'd guess you've seen it. IT'S DONE! He'LL see. O'Neill's rock'n'roll—isn't it? ")
    cjk = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(400))
    kana = "".join(chr(rng.randint(0x3041, 0x30FF)) for _ in range(200))
    hangul = "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(200))
    jamo = "".join(chr(0x1100 + rng.randint(0, 18)) + chr(0x1161 + rng.randint(0, 20)) for _ in range(50))
    emoji = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇭🇷", "🇯🇵", "❤️", "🏳️‍🌈", "🤖", "✨", "🔥", "1️⃣"]
    hr = ["čćđšž", "ČĆĐŠŽ", "Đurđevac", "Šibenik", "žličica", "Čakovec", "ćevapčići", "Dubrovačka"]
    hr_nfd = ["c\u030ce\u0301", "Z\u030c", "s\u030cuma", "dz\u030c", "a\u0301\u0327", "e\u0323\u0302"]
    other = ["Ἀθῆναι", "ά", "α\u0301", "हिन्दी", "नमस्ते", "العربية", "مَرْحَبًا", "ภาษาไทย", "Ω", "Å", "ﬁ", "①②", "½"]
    spaces = ["\t", "\r\n", "\u00a0", "\u2009", "\u3000", "\u200b", "\u2028", "\u000b", "\u000c", "  \n",
              "\n\n\n", " \t \n", "\u0085", "   ", "\r", "\u202f"]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                "</tool_call>", "<|fim_prefix|>", "<|im_start", "<think", "<|vision_start|>"]
    size = 0
    while size < target:
        k = rng.random()
        if k < 0.30:
            name = srcs[rng.randrange(len(srcs))]
            with open(os.path.join(libdir, name), encoding="utf-8", errors="replace") as f:
                src = f.read()
            a = rng.randrange(max(1, len(src) - 3000))
            s = src[a:a + rng.randint(200, 3000)]
        elif k < 0.50:
            words = prose.split(" ")
            s = " ".join(rng.choice(words) for _ in range(rng.randint(5, 60)))
            s = s.upper() if rng.random() < 0.1 else s
        elif k < 0.58:
            s = rng.choice([cjk, kana, hangul, jamo])[rng.randrange(100):][: rng.randint(5, 120)] + "。"
        elif k < 0.64:
            s = " ".join(rng.choice(emoji) * rng.randint(1, 3) for _ in range(rng.randint(1, 8)))
        elif k < 0.72:
            s = " ".join(rng.choice(hr + hr_nfd) for _ in range(rng.randint(1, 10)))
        elif k < 0.78:
            s = " ".join(rng.choice(other) for _ in range(rng.randint(1, 6)))
        elif k < 0.88:
            s = "".join(rng.choice(spaces) for _ in range(rng.randint(1, 5)))
        elif k < 0.94:
            s = rng.choice(specials) + rng.choice(["user\n", "assistant", "", " x", "\n"])
        else:
            s = rng.choice(["1234567890", "3.14159", "x" * rng.randint(1, 300), "=" * 80, "'s", "'S",
                            "'Ll", "'re'", "'VE", "don't", "...", "!!!", "a'ſ", "      x", "\n\n    y"])
        sep = rng.choice(["", " ", "\n", "\n\n", "  ", "\t"])
        parts.append(s + sep)
        size += len((s + sep).encode())
    return "".join(parts)


def mtpq_ids(path, extra=()):
    p = subprocess.run([MTPQ, "tokenize", "--tokenizer", TOK, *extra, path], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr)
        sys.exit(1)
    return [[int(x) for x in line.split()] for line in p.stdout.splitlines()]


tok = Tokenizer.from_file(TOK)
failures = []
with tempfile.TemporaryDirectory() as tmp:
    total_bytes = 0
    for seed in (1, 2, 3):
        text = mixed_text(seed, 400_000)
        path = os.path.join(tmp, f"mixed{seed}.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        total_bytes += len(text.encode())
        want = tok.encode(text, add_special_tokens=False).ids
        got = mtpq_ids(path)[0]
        if got != want:
            i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            ctx = tok.decode(want[max(0, i - 5):i + 5])
            failures.append(f"seed {seed}: first difference at token {i} of {len(want)} "
                            f"(mtpq {got[i:i + 6]} vs tokenizers {want[i:i + 6]}) near {ctx!r}")
    # JSONL: one document per line.
    docs = [mixed_text(s, 3000) for s in range(10, 40)]
    jp = os.path.join(tmp, "docs.jsonl")
    with open(jp, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "id": 1}) + "\n")
        f.write(json.dumps({"other": "no text field"}) + "\n")
    want = [i for d in docs for i in tok.encode(d, add_special_tokens=False).ids]
    got = mtpq_ids(jp)[0]
    if got != want:
        failures.append("jsonl: ids differ")
    print(f"parity checked on {total_bytes + sum(len(d.encode()) for d in docs)} bytes of mixed text")
    if BENCH:
        text = mixed_text(7, 4_000_000)
        path = os.path.join(tmp, "bench.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        t0 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        t_hf = time.perf_counter() - t0
        out = subprocess.run([MTPQ, "tokenize", "--tokenizer", TOK, "--count-only", path], capture_output=True,
                             text=True, check=True).stdout
        print(f"tokenizers {n / t_hf:,.0f} tokens/s ({t_hf:.3f} s, {n} tokens, 1 thread)")
        print("mtpq       " + out.strip())

if failures:
    for f in failures:
        print("FAIL:", f)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("tokenizer parity: all checks passed")
