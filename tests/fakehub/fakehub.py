#!/usr/bin/env python3
"""A fake Hugging Face Hub on loopback, owned by mtpq's tests.

Serves model repos from local directories with the endpoints mtpq uses
(hub-protocol.md 2-3): revision info, the paginated tree, /resolve/ (git
files inline; files >= --lfs-threshold as LFS: 302 to an object store on a
second port), repo creation, preupload, the LFS batch API (basic and
multipart), verify and the NDJSON commit.

The object store is either built in (--store builtin, 127.0.0.1: the one
with connection-level faults) or moto's S3 emulator from PyPI (--store moto,
on 127.0.0.2: real presigned GET/PUT URLs, multipart uploads with real part
ETags and CompleteMultipartUpload), wrapped to log and to inject 500s.

Fault injection: 503 or 429 on the first API requests, relative 307
redirects for a renamed repo (--rename OLD=NEW), cut connections (GET
mid-body, PUT mid-upload), ignored Range headers, corrupted LFS bytes, 500 on
store PUTs, per-object errors in the LFS batch answer, 412 on commits, 403
on repo creation.
Logs every request (with whether it carried authorization) as JSON lines to
--log. Prints {"hub": port, "store": port} on stdout.
"""
import argparse
import base64
import calendar
import hashlib
import http.server
import json
import os
import sys
import threading
import time
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
ap.add_argument("--commit-412", type=int, default=0, help="first N commits answer 412 (stale parent)")
ap.add_argument("--put-500", type=int, default=0, help="first N store PUTs answer 500")
ap.add_argument("--multipart-threshold", type=int, default=1 << 20, help="LFS objects at least this big go multipart")
ap.add_argument("--chunk-size", type=int, default=256 << 10)
ap.add_argument("--cut-put", type=int, default=0, help="first N builtin-store PUTs close mid-upload")
ap.add_argument("--lfs-error", type=int, default=0, help="first N objects to upload get a per-object batch error")
ap.add_argument("--rename", action="append", default=[], help="OLD=NEW: repo OLD answers 307 to a relative NEW path")
ap.add_argument("--throttle", type=int, default=0, help="builtin store GETs send at most this many KB/s")
ap.add_argument("--create-403", action="store_true", help="repo creation answers 403 (a token that may not create)")
ap.add_argument("--store", choices=["builtin", "moto"], default="builtin")
ap.add_argument("--log", default=None)
ap.add_argument("--replica", action="append", default=[],
                help="org/name=DIR: a layout replica, its big files served from disk as they are read (sparse "
                     "shards of real sizes); their LFS sha256 is a stand-in made from path and size, not the bytes'")
ap.add_argument("--expired", type=int, default=0,
                help="first N ranged builtin-store GETs answer 403 'Request has expired' (a signed URL gone stale)")
ap.add_argument("--url-ttl", type=int, default=3600, help="lifetime the builtin store's signed URLs state")
args = ap.parse_args()

lock = threading.RLock()
faults = {"503": args.api_503, "429": args.api_429, "cut": args.cut, "range": args.ignore_range, "expired": args.expired,
          "412": args.commit_412, "put500": args.put_500, "cutput": args.cut_put, "lfserr": args.lfs_error}
renamed = dict(x.split("=", 1) for x in args.rename)
repos = {}
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def entry(path, data, lfs):
    """one file of a repo; LFS bytes go to the object store under their sha256"""
    e = {"path": path, "size": len(data)}
    if lfs:
        e["sha256"] = hashlib.sha256(data).hexdigest()
        e["oid"] = git_sha1((POINTER % (e["sha256"], len(data))).encode())
        served = bytearray(data)
        if path == args.corrupt:
            served[len(served) // 2] ^= 1
        store.seed(e["sha256"], bytes(served))
    else:
        e["oid"], e["data"] = git_sha1(data), data
    return e


def new_commit(r, summary):
    r["commit"] = hashlib.sha1((r.get("commit", "") + summary +
                                json.dumps(sorted((k, v["oid"]) for k, v in r["files"].items()))).encode()).hexdigest()


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


class BuiltinStore:
    """objects by sha256 in memory, served by the Store handler below"""

    def __init__(self):
        self.objects, self.parts = {}, {}
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
        self.port, self.base = self.srv.server_port, f"http://127.0.0.1:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def seed(self, oid, data):
        self.objects.setdefault(oid, data)

    def seed_file(self, oid, path):
        """a replica's file: read from disk on each GET (it may be tens of GB, mostly a hole)"""
        self.objects.setdefault(oid, FileObject(path))

    def get(self, oid):
        return self.objects.get(oid)

    def get_url(self, oid):
        """signed like S3's presigned URLs: X-Amz-Date + X-Amz-Expires (the store checks them)"""
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        sig = hashlib.sha256(f"{oid}{date}".encode()).hexdigest()[:16]
        return f"{self.base}/{oid}?X-Amz-Date={date}&X-Amz-Expires={args.url_ttl}&X-Amz-Signature={sig}"

    def put_url(self, oid):
        return f"{self.base}/put/{oid}"

    def part_urls(self, oid, n):
        return "builtin", [f"{self.base}/part/{oid}/{i}" for i in range(1, n + 1)]

    def complete(self, oid, upload_id, plist):
        got, blob = self.parts.get(oid, {}), b""
        for pe in sorted(plist, key=lambda x: x["partNumber"]):
            etag, chunk = got.get(pe["partNumber"], (None, None))
            if etag is None or etag != pe["etag"]:
                return f"part {pe['partNumber']}: etag {pe['etag']} != {etag}"
            blob += chunk
        if hashlib.sha256(blob).hexdigest() != oid:
            return "assembled parts do not hash to the oid"
        self.objects[oid] = blob
        return None


class Tap:
    """WSGI wrapper around moto: logs client requests like the builtin store
    and injects 500 on PUT; the fake Hub's own boto3 calls pass unlogged"""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        qs = environ.get("QUERY_STRING")
        h = type("H", (), {})()
        h.command, h.path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "") + ("?" + qs if qs else "")
        h.headers = {"authorization": environ.get("HTTP_AUTHORIZATION"), "range": environ.get("HTTP_RANGE")}
        internal = "Boto3" in environ.get("HTTP_USER_AGENT", "") or "Botocore" in environ.get("HTTP_USER_AGENT", "")
        if not internal and h.command == "PUT" and take("put500"):
            environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            log("store", h, 500, 13)
            start_response("500 Internal Server Error", [("Content-Length", "13")])
            return [b"InternalError"]
        st = {}

        def sr(status, headers, exc=None):
            st["s"] = int(status.split()[0])
            return start_response(status, headers, exc)
        it = self.app(environ, sr)
        try:
            out = b"".join(it)
        finally:
            getattr(it, "close", lambda: None)()
        if not internal:
            log("store", h, st.get("s"), len(out) if h.command != "HEAD" else 0)
        return [out]


class MotoStore:
    """moto's S3 emulator (PyPI) on 127.0.0.2, a different host from the Hub"""

    def __init__(self):
        import logging
        import boto3
        from botocore.config import Config
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server
        self.srv = make_server("127.0.0.2", 0, Tap(DomainDispatcherApplication(create_backend_app)), threaded=True)
        self.port, self.base = self.srv.server_port, f"http://127.0.0.2:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.s3 = boto3.client("s3", endpoint_url=self.base, region_name="us-east-1", aws_access_key_id="fake",
                               aws_secret_access_key="fake",
                               config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        self.s3.create_bucket(Bucket="lfs")

    def seed(self, oid, data):
        self.s3.put_object(Bucket="lfs", Key=oid, Body=data)

    def get(self, oid):
        try:
            return self.s3.get_object(Bucket="lfs", Key=oid)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None

    def _sign(self, op, **kw):
        return self.s3.generate_presigned_url(op, Params=dict(Bucket="lfs", Key=kw.pop("oid"), **kw), ExpiresIn=3600)

    def get_url(self, oid):
        return self._sign("get_object", oid=oid)

    def put_url(self, oid):
        return self._sign("put_object", oid=oid)

    def part_urls(self, oid, n):
        uid = self.s3.create_multipart_upload(Bucket="lfs", Key=oid)["UploadId"]
        return uid, [self._sign("upload_part", oid=oid, UploadId=uid, PartNumber=i) for i in range(1, n + 1)]

    def complete(self, oid, upload_id, plist):
        try:
            self.s3.complete_multipart_upload(
                Bucket="lfs", Key=oid, UploadId=upload_id,
                MultipartUpload={"Parts": [{"ETag": p["etag"], "PartNumber": p["partNumber"]} for p in plist]})
        except Exception as e:  # moto checks the part ETags
            return f"CompleteMultipartUpload: {e}"
        data = self.get(oid)
        if data is None or hashlib.sha256(data).hexdigest() != oid:
            return "assembled parts do not hash to the oid"
        return None


class FileObject:
    """bytes of a file on disk, read as they are served"""

    def __init__(self, path):
        self.path, self.size = path, os.path.getsize(path)

    def __len__(self):
        return self.size

    def read(self, a, n):
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), n, a)


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

    def head(self, status, headers, length):
        """status line and headers, announcing a body of `length` bytes"""
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def reply(self, status, body=b"", headers=(), server="hub"):
        log(server, self, status, 0 if self.command == "HEAD" else len(body))
        self.head(status, headers, len(body))
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
        if self.moved(u):
            return
        if u.path.startswith("/api/"):
            if take("503"):
                return self.error(503, "Unavailable", "injected 503")
            if take("429"):
                return self.error(429, "RateLimited", "injected 429",
                                  [("RateLimit", '"api";r=0;t=0'), ("Retry-After", "0")])
        if u.path.startswith("/api/models/") and len(parts) == 5:  # repo info
            r = repos.get(parts[3] + "/" + parts[4])
            if not r:
                return self.error(404, "RepoNotFound", f"Repository {parts[3]}/{parts[4]} not found")
            return self.reply(200, json.dumps({"id": parts[3] + "/" + parts[4], "sha": r["commit"]}).encode(),
                              [("Content-Type", "application/json")])
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
                loc = store.get_url(f["sha256"])
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


    def moved(self, u):
        """a renamed repo: 307 with a relative Location (path only, no host)"""
        for old, new in renamed.items():
            for pre in ("/api/models/", "/"):
                if u.path.startswith(pre + old + "/"):
                    loc = pre + new + u.path[len(pre + old):] + ("?" + u.query if u.query else "")
                    self.reply(307, b"", [("Location", loc)])
                    return True
        return False

    def body(self):
        n = int(self.headers.get("content-length", "0"))
        return self.rfile.read(n)

    def do_POST(self):
        u = urllib.parse.urlsplit(self.path)
        parts_ = [urllib.parse.unquote(p) for p in u.path.split("/")]
        data = self.body()
        # the multipart completion is authorised by its URL, not the token
        if u.path.startswith("/api/complete/"):
            oid, uid = parts_[3], urllib.parse.parse_qs(u.query).get("upload_id", [""])[0]
            why = store.complete(oid, uid, json.loads(data)["parts"])
            if why:
                return self.error(400, "BadPart", why)
            return self.reply(200, b"{}")
        if args.token and self.headers.get("authorization") != "Bearer " + args.token:
            return self.error(401, "Unauthorized", "Invalid credentials in Authorization header")
        if self.moved(u):
            return
        if take("503"):
            return self.error(503, "Unavailable", "injected 503")
        if u.path == "/api/repos/create":
            if args.create_403:
                return self.error(403, "Forbidden", "You don't have the rights to create a model under this namespace")
            req = json.loads(data)
            rid = (req.get("organization") or "user") + "/" + req["name"]
            with lock:
                if rid in repos:
                    return self.error(409, "Conflict", "You already created this model repo")
                repos[rid] = {"files": {".gitattributes": entry(".gitattributes", b"*.safetensors filter=lfs\n", False)}}
                new_commit(repos[rid], "initial commit")
            return self.reply(200, json.dumps({"url": f"http://127.0.0.1:{self.server.server_port}/{rid}",
                                               "id": rid}).encode())
        if u.path.startswith("/api/models/") and len(parts_) >= 7 and parts_[5] == "preupload":
            r = repos.get(parts_[3] + "/" + parts_[4])
            if not r:
                return self.error(404, "RepoNotFound", "no such repo")
            out = []
            for f in json.loads(data)["files"]:
                lfs = f["size"] >= args.lfs_threshold
                cur = r["files"].get(f["path"])
                oid = None
                if cur:
                    oid = cur.get("sha256") or cur["oid"]
                out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                            "shouldIgnore": False, "oid": oid})
            return self.reply(200, json.dumps({"files": out}).encode())
        if u.path.endswith(".git/info/lfs/objects/batch"):
            req = json.loads(data)
            hub = f"http://127.0.0.1:{self.server.server_port}"
            out = []
            for o in req["objects"]:
                oid, size = o["oid"], o["size"]
                if store.get(oid) is not None:
                    out.append({"oid": oid, "size": size})
                elif take("lfserr"):
                    out.append({"oid": oid, "size": size, "error": {"code": 422, "message": "injected object error"}})
                elif size >= args.multipart_threshold:
                    n = (size + args.chunk_size - 1) // args.chunk_size
                    hdr = {"chunk_size": str(args.chunk_size)}
                    uid, urls = store.part_urls(oid, n)
                    for i, url in enumerate(urls, 1):
                        hdr["%05d" % i] = url
                    out.append({"oid": oid, "size": size, "actions": {"upload": {
                        "href": f"{hub}/api/complete/{oid}?upload_id={urllib.parse.quote(uid)}", "header": hdr}}})
                else:
                    out.append({"oid": oid, "size": size, "authenticated": True,
                                "actions": {"upload": {"href": store.put_url(oid)},
                                            "verify": {"href": f"{hub}/api/lfs-verify", "header": {}}}})
            return self.reply(200, json.dumps({"transfer": "basic", "objects": out}).encode(),
                              [("Content-Type", "application/vnd.git-lfs+json")])
        if u.path == "/api/lfs-verify":
            o = json.loads(data)
            got = store.get(o["oid"])
            if got is None or len(got) != o["size"] or hashlib.sha256(got).hexdigest() != o["oid"]:
                return self.error(404, "NotFound", "object not stored")
            return self.reply(200, b"{}")
        if u.path.startswith("/api/models/") and len(parts_) >= 7 and parts_[5] == "commit":
            rid = parts_[3] + "/" + parts_[4]
            r = repos.get(rid)
            if not r:
                return self.error(404, "RepoNotFound", "create_commit assumes the repo exists")
            lines = [json.loads(l) for l in data.decode().splitlines() if l.strip()]
            if not lines or lines[0]["key"] != "header" or not lines[0]["value"].get("summary"):
                return self.error(400, "BadRequest", "the first line must be a header with a summary")
            parent = lines[0]["value"].get("parentCommit")
            if take("412") or (parent and not r["commit"].startswith(parent)):
                return self.error(412, "PreconditionFailed", "The branch was updated since you opened this page")
            with lock:
                for l in lines[1:]:
                    v = l["value"]
                    if l["key"] == "file":
                        raw = base64.b64decode(v["content"]) if v.get("encoding") == "base64" else v["content"].encode()
                        r["files"][v["path"]] = entry(v["path"], raw, False)
                    elif l["key"] == "lfsFile":
                        got = store.get(v["oid"])
                        if got is None or len(got) != v["size"]:
                            return self.error(422, "BadRequest", f"LFS object {v['oid']} was not uploaded")
                        r["files"][v["path"]] = {"path": v["path"], "size": v["size"], "sha256": v["oid"],
                                                 "oid": git_sha1((POINTER % (v["oid"], v["size"])).encode())}
                    elif l["key"] == "deletedFile":
                        r["files"].pop(v["path"], None)
                new_commit(r, lines[0]["value"]["summary"])
            hub = f"http://127.0.0.1:{self.server.server_port}"
            return self.reply(200, json.dumps({"commitOid": r["commit"], "commitUrl": f"{hub}/{rid}/commit/{r['commit']}",
                                               "pullRequestUrl": None}).encode())
        return self.error(404, "NotFound", f"no route for POST {u.path}")


class Store(Base):
    def do_PUT(self):
        n = int(self.headers.get("content-length", "0"))
        if take("cutput"):  # read half the body, then drop the connection
            self.rfile.read(n // 2)
            log("store", self, "cut", 0)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        data = self.rfile.read(n)
        if take("put500"):
            return self.reply(500, b"InternalError", server="store")
        p = self.path.strip("/").split("/")
        if p[0] == "put":
            if hashlib.sha256(data).hexdigest() != p[1]:
                return self.reply(400, b"BadDigest", server="store")
            store.objects[p[1]] = data
            return self.reply(200, b"", server="store")
        if p[0] == "part":
            etag = '"%s"' % hashlib.md5(data).hexdigest()
            store.parts.setdefault(p[1], {})[int(p[2])] = (etag, data)
            return self.reply(200, b"", [("ETag", etag)], server="store")
        return self.reply(404, b"NoSuchKey", server="store")

    def do_GET(self):
        oid, _, query = self.path.strip("/").partition("?")
        data = store.objects.get(oid)
        if data is None:
            return self.reply(404, b"NoSuchKey", server="store")
        q = urllib.parse.parse_qs(query)
        if "X-Amz-Date" in q:  # an expired signed URL is refused, as S3 refuses one
            t0 = calendar.timegm(time.strptime(q["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
            if time.time() > t0 + int(q["X-Amz-Expires"][0]):
                return self.reply(403, b"AccessDenied: Request has expired", server="store")
        rg = self.headers.get("range")
        if rg and take("expired"):
            return self.reply(403, b"AccessDenied: Request has expired", server="store")
        a, b, status, hdr = 0, len(data) - 1, 200, []
        if rg and not take("range"):
            rng = parse_range(rg, len(data))
            if not rng:
                return self.reply(416, b"", [("Content-Range", f"bytes */{len(data)}")], server="store")
            a, b = rng
            status = 206
            hdr.append(("Content-Range", f"bytes {a}-{b}/{len(data)}"))
        if isinstance(data, FileObject):  # streamed in 4 MiB pieces
            log("store", self, status, b + 1 - a)
            self.head(status, hdr, b + 1 - a)
            for at in range(a, b + 1, 4 << 20):
                self.wfile.write(data.read(at, min(4 << 20, b + 1 - at)))
            return
        body = data[a:b + 1]
        if take("cut"):  # promise the whole body, send half, drop the connection
            log("store", self, "cut", len(body) // 2)
            self.head(status, hdr, len(body))
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if args.throttle:  # in 16 KB pieces, paced
            log("store", self, status, len(body))
            self.head(status, hdr, len(body))
            for i in range(0, len(body), 16384):
                self.wfile.write(body[i:i + 16384])
                self.wfile.flush()
                time.sleep(16.0 / args.throttle)
            return
        self.reply(status, body, hdr, server="store")


store = MotoStore() if args.store == "moto" else BuiltinStore()
for spec in args.repo:
    rid, d = spec.split("=", 1)
    files = {}
    for root, _, names in os.walk(d):
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d)
            data = open(p, "rb").read()
            files[rel] = entry(rel, data, len(data) >= args.lfs_threshold)
    repos[rid] = {"files": files}
    new_commit(repos[rid], "initial")
for spec in args.replica:
    if args.store != "builtin":
        sys.exit("--replica needs the builtin store")
    rid, d = spec.split("=", 1)
    files = {}
    for n in sorted(os.listdir(d)):
        p, size = os.path.join(d, n), os.path.getsize(os.path.join(d, n))
        if not n.endswith(".safetensors"):  # small files: real hashes (mtpq checks what it downloads whole)
            files[n] = entry(n, open(p, "rb").read(), size >= args.lfs_threshold)
            continue
        sha = hashlib.sha256(f"replica:{rid}/{n}:{size}".encode()).hexdigest()
        store.seed_file(sha, p)
        files[n] = {"path": n, "size": size, "sha256": sha,
                    "oid": git_sha1((POINTER % (sha, size)).encode())}
    repos[rid] = {"files": files}
    new_commit(repos[rid], "initial")



hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
print(json.dumps({"hub": hub.server_port, "store": store.port}), flush=True)
try:
    hub.serve_forever()
except KeyboardInterrupt:
    pass
