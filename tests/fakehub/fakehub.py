#!/usr/bin/env python3
"""A fake Hugging Face Hub on loopback, owned by mtpq's tests.

Serves read-only model repos from local directories with the endpoints
`mtpq download` uses (hub-protocol.md 2.1-2.5): revision info, the paginated
tree, /resolve/ (git files inline; files >= --lfs-threshold as LFS: 302 to an
object store on a second port). Fault injection: 503 or 429 on the first API
requests, cut connections and ignored Range headers on the store, corrupted
LFS bytes. Logs every request (with whether it carried authorization) as
JSON lines to --log. Prints {"hub": port, "store": port} on stdout.
"""
import argparse
import hashlib
import http.server
import json
import os
import sys
import threading
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--repo", action="append", default=[], help="org/name=DIR")
ap.add_argument("--token", default=None)
ap.add_argument("--lfs-threshold", type=int, default=1024)
ap.add_argument("--page-size", type=int, default=100)
ap.add_argument("--api-503", type=int, default=0)
ap.add_argument("--api-429", type=int, default=0)
ap.add_argument("--cut", type=int, default=0, help="first N store GETs close mid-body")
ap.add_argument("--ignore-range", type=int, default=0, help="first N ranged store GETs answer 200")
ap.add_argument("--corrupt", default=None, help="serve this LFS path with one byte flipped")
ap.add_argument("--log", default=None)
args = ap.parse_args()

lock = threading.Lock()
faults = {"503": args.api_503, "429": args.api_429, "cut": args.cut, "range": args.ignore_range}
repos, objects = {}, {}
for spec in args.repo:
    rid, d = spec.split("=", 1)
    files = {}
    for root, _, names in os.walk(d):
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d)
            data = open(p, "rb").read()
            e = {"path": rel, "size": len(data), "data": data,
                 "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
            if len(data) >= args.lfs_threshold:
                e["sha256"] = hashlib.sha256(data).hexdigest()
                served = bytearray(data)
                if rel == args.corrupt:
                    served[len(served) // 2] ^= 1
                objects[e["sha256"]] = bytes(served)
            files[rel] = e
    commit = hashlib.sha1(json.dumps(sorted((k, v["oid"]) for k, v in files.items())).encode()).hexdigest()
    repos[rid] = {"commit": commit, "files": files}


def take(kind):
    with lock:
        if faults[kind] > 0:
            faults[kind] -= 1
            return True
    return False


def log(server, h, status, nbytes=0):
    if args.log:
        with lock, open(args.log, "a") as f:
            f.write(json.dumps({"server": server, "method": h.command, "path": h.path, "status": status,
                                "auth": h.headers.get("authorization") is not None,
                                "range": h.headers.get("range"), "bytes": nbytes}) + "\n")


def parse_range(rg, size):
    """bytes=a- or bytes=a-b -> (a, b) inclusive, or None if unsatisfiable/absent"""
    if not rg or not rg.startswith("bytes="):
        return None
    a, _, b = rg[6:].partition("-")
    a, b = int(a), (int(b) if b else size - 1)
    if a >= size or b < a:
        return None
    return a, min(b, size - 1)


class Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", headers=(), server="hub"):
        log(server, self, status, 0 if self.command == "HEAD" else len(body))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, msg, extra=()):
        self.reply(status, json.dumps({"error": msg}).encode(),
                   [("X-Error-Code", code), ("X-Error-Message", msg), ("Content-Type", "application/json")] + list(extra))


class Hub(Base):
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in u.path.split("/")]
        if args.token and self.headers.get("authorization") != "Bearer " + args.token:
            return self.error(401, "RepoNotFound", "Invalid credentials in Authorization header")
        if u.path.startswith("/api/"):
            if take("503"):
                return self.error(503, "Unavailable", "injected 503")
            if take("429"):
                return self.error(429, "RateLimited", "injected 429",
                                  [("RateLimit", '"api";r=0;t=0'), ("Retry-After", "0")])
        if u.path.startswith("/api/models/") and len(parts) >= 7 and parts[5] in ("revision", "tree"):
            rid = parts[3] + "/" + parts[4]
            r = repos.get(rid)
            if not r:
                return self.error(404, "RepoNotFound", f"Repository {rid} not found")
            rev = parts[6]
            if rev not in ("main", r["commit"]):
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            if parts[5] == "revision":
                body = {"id": rid, "sha": r["commit"],
                        "siblings": [{"rfilename": k} for k in sorted(r["files"])]}
                return self.reply(200, json.dumps(body).encode(), [("Content-Type", "application/json")])
            q = urllib.parse.parse_qs(u.query)
            start = int(q.get("cursor", ["0"])[0])
            items = []
            for k in sorted(r["files"]):
                f = r["files"][k]
                it = {"type": "file", "path": k, "size": f["size"], "oid": f["oid"]}
                if "sha256" in f:
                    it["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 134}
                items.append(it)
            dirs = sorted({os.path.dirname(k) for k in r["files"] if os.path.dirname(k)})
            items += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in dirs]
            page = items[start:start + args.page_size]
            hdr = [("Content-Type", "application/json")]
            if start + args.page_size < len(items):
                nxt = f"http://127.0.0.1:{self.server.server_port}{u.path}?recursive=true&cursor={start + args.page_size}"
                hdr.append(("Link", f'<{nxt}>; rel="next"'))
            return self.reply(200, json.dumps(page).encode(), hdr)
        if len(parts) >= 6 and parts[3] == "resolve":
            rid = parts[1] + "/" + parts[2]
            r = repos.get(rid)
            if not r:
                return self.error(404, "RepoNotFound", f"Repository {rid} not found")
            if parts[4] not in ("main", r["commit"]):
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {parts[4]}")
            path = "/".join(parts[5:])
            f = r["files"].get(path)
            if not f:
                return self.error(404, "EntryNotFound", f"{path} does not exist", [("X-Repo-Commit", r["commit"])])
            if "sha256" in f:
                loc = f"http://127.0.0.1:{store_port}/{f['sha256']}"
                return self.reply(302, b"", [("Location", loc), ("X-Repo-Commit", r["commit"]),
                                             ("X-Linked-Etag", '"%s"' % f["sha256"]),
                                             ("X-Linked-Size", str(f["size"])), ("ETag", '"%s"' % f["oid"])])
            data, status, hdr = f["data"], 200, [("X-Repo-Commit", r["commit"]), ("ETag", '"%s"' % f["oid"])]
            rng = parse_range(self.headers.get("range"), len(data))
            if rng:
                a, b = rng
                data, status = data[a:b + 1], 206
                hdr.append(("Content-Range", f"bytes {a}-{b}/{f['size']}"))
            return self.reply(status, data, hdr)
        return self.error(404, "NotFound", f"no route for {u.path}")


class Store(Base):
    def do_GET(self):
        oid = self.path.strip("/").split("?")[0]
        data = objects.get(oid)
        if data is None:
            return self.reply(404, b"NoSuchKey", server="store")
        rg = self.headers.get("range")
        a, b, status, hdr = 0, len(data) - 1, 200, []
        if rg and not take("range"):
            rng = parse_range(rg, len(data))
            if not rng:
                return self.reply(416, b"", [("Content-Range", f"bytes */{len(data)}")], server="store")
            a, b = rng
            status = 206
            hdr.append(("Content-Range", f"bytes {a}-{b}/{len(data)}"))
        body = data[a:b + 1]
        if take("cut"):  # promise the whole body, send half, drop the connection
            log("store", self, "cut", len(body) // 2)
            self.send_response(status)
            for k, v in hdr:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.reply(status, body, hdr, server="store")


store = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
store_port = store.server_port
hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
threading.Thread(target=store.serve_forever, daemon=True).start()
print(json.dumps({"hub": hub.server_port, "store": store_port}), flush=True)
try:
    hub.serve_forever()
except KeyboardInterrupt:
    pass
