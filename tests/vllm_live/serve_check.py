#!/usr/bin/env python3
"""Wait for vLLM's OpenAI server on PORT (up to SECONDS, or until the
process PID has ended), then one greedy completion: exit 0 when it answers
with text. Usage: serve_check.py PORT SECONDS PID"""
import json
import os
import sys
import time
import urllib.request

port, limit, pid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
base = f"http://127.0.0.1:{port}"
t0 = time.time()
while True:
    try:
        models = json.load(urllib.request.urlopen(base + "/v1/models", timeout=5))
        break
    except Exception as e:  # not up yet
        try:
            os.kill(pid, 0)
        except OSError:
            print(f"the server (pid {pid}) ended before answering: {e}")
            sys.exit(1)
        if time.time() - t0 > limit:
            print(f"server not up after {limit:.0f} s: {e}")
            sys.exit(1)
        time.sleep(2)
model = models["data"][0]["id"]
print(f"up after {time.time() - t0:.0f} s; model {model}")
req = urllib.request.Request(base + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                             data=json.dumps({"model": model, "prompt": "def fibonacci(n):\n", "max_tokens": 48,
                                              "temperature": 0}).encode())
ans = json.load(urllib.request.urlopen(req, timeout=60))
text = ans["choices"][0]["text"]
print("completion:", json.dumps(text))
try:
    m = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    print("\n".join(l for l in m.splitlines() if l.startswith("vllm:spec_decode") and "_created" not in l))
except Exception as e:
    print("metrics:", e)
sys.exit(0 if text else 1)
