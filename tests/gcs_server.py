"""A local Google Cloud Storage for the gs:// tests, reached through TensorFlow's own client.

TensorFlow's GCS file system always talks to https://www.googleapis.com (the JSON API) and
https://storage.googleapis.com (object reads), through libcurl, which honours HTTPS_PROXY and
CURL_CA_BUNDLE. A process given `GcsServer.env` therefore sends every request to the proxy
here, on 127.0.0.1: it answers CONNECT for those two hosts only, terminates TLS with a
certificate from a certificate authority made when the server starts, and hands the decrypted
stream to a minimal JSON-API server over an in-memory store. Nothing leaves the machine.

Buckets can be made missing (404, as Google answers), forbidden (403), failing (503, which
TensorFlow retries with backoff) or hidden: a 403 for the bucket's own metadata while its
objects answer, as for a user with an object role only (no storage.buckets.get); every
request is logged for the tests to count.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import socket
import socketserver
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

API_HOST = "www.googleapis.com"
MEDIA_HOST = "storage.googleapis.com"
PAGE_SIZE = 1000


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A test certificate authority and a certificate it signed for Google's two storage hosts:
    (CA bundle, certificate chain, key), written into `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))

    def build(subject: str, public_key: Any, issuer: x509.Name, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
        else:
            names = [x509.DNSName(API_HOST), x509.DNSName(MEDIA_HOST)]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t2tcli test CA")])
    ca_cert = build("t2tcli test CA", ca_key.public_key(), ca_name, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build(API_HOST, key.public_key(), ca_name, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(ca_cert.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


@dataclass
class Blob:
    data: bytes
    generation: int
    updated: float

    def resource(self, bucket: str, name: str) -> dict[str, Any]:
        stamp = datetime.datetime.fromtimestamp(self.updated, datetime.UTC)
        return {
            "kind": "storage#object",
            "bucket": bucket,
            "name": name,
            "size": str(len(self.data)),
            "generation": str(self.generation),
            "updated": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
        }


@dataclass
class Store:
    """The buckets and their objects, and how the server misbehaves for some bucket names."""

    buckets: dict[str, dict[str, Blob]] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    hidden: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    uploads: dict[str, tuple[str, str, bytearray]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _generation: int = 0

    def put(self, bucket: str, name: str, data: bytes) -> Blob:
        with self.lock:
            self._generation += 1
            blob = Blob(bytes(data), self._generation, time.time())
            self.buckets[bucket][name] = blob
            return blob


class HttpError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class GcsHandler(BaseHTTPRequestHandler):
    """The JSON API as TensorFlow's client uses it: bucket get; object metadata, list, read
    (ranged), delete, rewrite and copy; media, multipart and resumable uploads."""

    protocol_version = "HTTP/1.1"
    server: Any  # the proxy, whose `store` this serves

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _body(self) -> bytes:
        """The request body; chunked transfer wins over Content-Length (libcurl may send both)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _serve(self) -> None:
        store: Store = self.server.store
        url = urllib.parse.urlsplit(self.path)
        host = self.headers.get("Host", "").split(":")[0]
        store.requests.append((self.command, host, url.path))
        body = self._body()
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        segments = [urllib.parse.unquote(s) for s in url.path.split("/")[1:]]
        try:
            status, headers, payload = self._route(store, host, segments, query, body)
        except HttpError as exc:
            status, headers = exc.code, {}
            payload = json.dumps({"error": {"code": exc.code, "message": str(exc)}}).encode()
        if isinstance(payload, dict):
            payload = json.dumps(payload).encode()
            headers.setdefault("Content-Type", "application/json")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _bucket(self, store: Store, name: str) -> dict[str, Blob]:
        if name in store.forbidden:
            raise HttpError(403, f"no access to bucket {name}")
        if name in store.failing:
            raise HttpError(503, "backend unavailable")
        if name not in store.buckets:
            raise HttpError(404, f"The specified bucket does not exist: {name}")
        return store.buckets[name]

    def _object(self, store: Store, bucket: str, name: str) -> Blob:
        blob = self._bucket(store, bucket).get(name)
        if blob is None:
            raise HttpError(404, f"No such object: {bucket}/{name}")
        return blob

    def _route(
        self, store: Store, host: str, seg: list[str], query: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        method = self.command
        if host == MEDIA_HOST and method == "GET" and len(seg) >= 2:
            return self._read(self._object(store, seg[0], "/".join(seg[1:])))
        if seg[:3] == ["upload", "storage", "v1"] and len(seg) == 6 and seg[3] == "b" and seg[5] == "o":
            return self._upload(store, seg[4], query, body)
        if seg[:3] != ["storage", "v1", "b"] or len(seg) < 4:
            raise HttpError(400, f"unsupported request {method} {self.path}")
        bucket = seg[3]
        if len(seg) == 4 and method == "GET":
            self._bucket(store, bucket)
            if bucket in store.hidden:
                raise HttpError(403, f"no storage.buckets.get access to bucket {bucket}")
            return 200, {}, {"kind": "storage#bucket", "name": bucket, "location": "US"}
        if len(seg) == 5 and seg[4] == "o" and method == "GET":
            return 200, {}, self._list(self._bucket(store, bucket), query)
        if len(seg) >= 6 and seg[4] == "o":
            name = seg[5]
            if len(seg) == 6 and method == "GET":
                blob = self._object(store, bucket, name)
                return self._read(blob) if query.get("alt") == "media" else (200, {}, blob.resource(bucket, name))
            if len(seg) == 6 and method == "DELETE":
                self._object(store, bucket, name)
                with store.lock:
                    del store.buckets[bucket][name]
                return 204, {}, b""
            if len(seg) == 11 and seg[6] in ("rewriteTo", "copyTo") and method == "POST":
                blob = self._object(store, bucket, name)
                self._bucket(store, seg[8])
                copied = store.put(seg[8], seg[10], blob.data).resource(seg[8], seg[10])
                if seg[6] == "copyTo":
                    return 200, {}, copied
                size = copied["size"]
                rewrite = {"kind": "storage#rewriteResponse", "done": True, "resource": copied}
                return 200, {}, {**rewrite, "totalBytesRewritten": size, "objectSize": size}
        raise HttpError(400, f"unsupported request {method} {self.path}")

    def _read(self, blob: Blob) -> tuple[int, dict[str, str], bytes]:
        header = self.headers.get("Range", "")
        if not header.startswith("bytes="):
            return 200, {}, blob.data
        first, _, last = header[len("bytes=") :].partition("-")
        start = int(first)
        end = min(int(last) if last else len(blob.data) - 1, len(blob.data) - 1)
        if start >= len(blob.data):
            return 416, {"Content-Range": f"bytes */{len(blob.data)}"}, b""
        return 206, {"Content-Range": f"bytes {start}-{end}/{len(blob.data)}"}, blob.data[start : end + 1]

    @staticmethod
    def _list(objects: dict[str, Blob], query: dict[str, str]) -> dict[str, Any]:
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        entries: list[tuple[str, bool]] = []  # (name, is a prefix), sorted, each once
        seen_prefixes = set()
        for name in sorted(objects):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                sub = prefix + rest[: rest.index(delimiter) + len(delimiter)]
                if sub not in seen_prefixes:
                    seen_prefixes.add(sub)
                    entries.append((sub, True))
            else:
                entries.append((name, False))
        start = int(query.get("pageToken") or 0)
        size = min(int(query.get("maxResults") or PAGE_SIZE), PAGE_SIZE)
        page = entries[start : start + size]
        out: dict[str, Any] = {"kind": "storage#objects"}
        items = [{"name": n} for n, is_prefix in page if not is_prefix]
        prefixes = [n for n, is_prefix in page if is_prefix]
        if items:
            out["items"] = items
        if prefixes:
            out["prefixes"] = prefixes
        if start + size < len(entries):
            out["nextPageToken"] = str(start + size)
        return out

    def _upload(self, store: Store, bucket: str, query: dict[str, str], body: bytes) -> tuple[int, dict[str, str], Any]:
        self._bucket(store, bucket)
        kind = query.get("uploadType")
        if self.command == "POST" and kind == "media":
            return self._create(store, bucket, query["name"], body, query)
        if self.command == "POST" and kind == "multipart":
            metadata, data = _multipart(self.headers.get("Content-Type", ""), body)
            return self._create(store, bucket, query.get("name") or metadata["name"], data, query)
        if self.command == "POST" and kind == "resumable":
            upload_id = f"{len(store.uploads) + 1}-{time.monotonic_ns()}"
            store.uploads[upload_id] = (bucket, query["name"], bytearray())
            location = f"https://{API_HOST}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={upload_id}"
            return 200, {"Location": location}, b""
        if self.command == "PUT" and kind == "resumable" and query.get("upload_id") in store.uploads:
            return self._resume(store, query["upload_id"], body)
        raise HttpError(400, f"unsupported upload {self.command} {self.path}")

    def _create(
        self, store: Store, bucket: str, name: str, data: bytes, query: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        if query.get("ifGenerationMatch") == "0" and name in store.buckets[bucket]:
            raise HttpError(412, f"{bucket}/{name} exists")
        return 200, {}, store.put(bucket, name, data).resource(bucket, name)

    def _resume(self, store: Store, upload_id: str, body: bytes) -> tuple[int, dict[str, str], Any]:
        bucket, name, received = store.uploads[upload_id]
        content_range = self.headers.get("Content-Range", "")  # "bytes A-B/TOTAL" or "bytes */TOTAL"
        span, _, total_text = content_range.removeprefix("bytes ").partition("/")
        if span and span != "*":
            start = int(span.split("-")[0])
            del received[start:]
            received.extend(body)
        elif not content_range:  # an empty object: no range at all
            received.extend(body)
        total = int(total_text) if total_text.isdigit() else len(received)
        if len(received) < total:
            headers = {"Range": f"bytes=0-{len(received) - 1}"} if received else {}
            return 308, headers, b""
        del store.uploads[upload_id]
        return 200, {}, store.put(bucket, name, bytes(received)).resource(bucket, name)


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes]:
    """(metadata, media) of a multipart/related upload body."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    parts = [p for p in body.split(b"--" + boundary) if p.strip() not in (b"", b"--")]
    decoded = []
    for part in parts[:2]:
        _, _, content = part.partition(b"\r\n\r\n")
        decoded.append(content.removesuffix(b"\r\n"))
    return json.loads(decoded[0]), decoded[1]


class _ConnectHandler(socketserver.StreamRequestHandler):
    """CONNECT to one of Google's storage hosts, then TLS with the test certificate, then the API."""

    server: Any

    def handle(self) -> None:
        request_line = self.rfile.readline().decode("latin-1").split()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        if len(request_line) < 2 or request_line[0] != "CONNECT" or request_line[1] not in self.server.hosts:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        try:
            tls = self.server.tls.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with contextlib.suppress(OSError):
            GcsHandler(tls, self.client_address, self.server)
        with contextlib.suppress(OSError):
            tls.close()


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    hosts = {f"{API_HOST}:443", f"{MEDIA_HOST}:443"}

    def __init__(self, store: Store, tls: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _ConnectHandler)
        self.store = store
        self.tls = tls


def gcs_env(proxy: str, ca_bundle: str) -> dict[str, str]:
    """What a process needs for TensorFlow's gs:// client to reach the proxy at `proxy`
    (http://127.0.0.1:PORT), trusting `ca_bundle`, with a fixed token and no metadata server."""
    return {
        "HTTPS_PROXY": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "",
        "no_proxy": "",
        "CURL_CA_BUNDLE": ca_bundle,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token",
        "NO_GCE_CHECK": "true",
        "GOOGLE_APPLICATION_CREDENTIALS": "",
    }


class GcsServer:
    """A running proxy and store; `env` points a process at it."""

    def __init__(self, proxy: _Proxy, ca_bundle: Path) -> None:
        self.proxy = proxy
        self.store = proxy.store
        self.url = f"http://127.0.0.1:{proxy.server_address[1]}"
        self.env = gcs_env(self.url, str(ca_bundle))

    def bucket(self, name: str) -> GcsStore:
        with self.store.lock:
            self.store.buckets.setdefault(name, {})
        return GcsStore(self, name)


class GcsStore:
    """A bucket on the local server, seen directly in its memory (never through TensorFlow)."""

    def __init__(self, server: GcsServer, bucket: str) -> None:
        self.server = server
        self.bucket = bucket
        self.root = f"gs://{bucket}"
        self.env = server.env

    def write(self, rel: str, data: bytes) -> None:
        self.server.store.put(self.bucket, rel, data)

    def read(self, rel: str) -> bytes:
        return self.server.store.buckets[self.bucket][rel].data

    def names(self, rel_dir: str) -> list[str]:
        """Every object below `rel_dir` but directory markers, by its name relative to it."""
        prefix = rel_dir.rstrip("/") + "/"
        with self.server.store.lock:
            names = list(self.server.store.buckets[self.bucket])
        return sorted(n[len(prefix) :] for n in names if n.startswith(prefix) and not n.endswith("/"))


@contextlib.contextmanager
def gcs_server() -> Iterator[GcsServer]:
    """The proxy and store, on a free port of 127.0.0.1, for the block."""
    with tempfile.TemporaryDirectory(prefix="t2tcli-gcs-") as directory:
        ca, chain, key = make_certificates(Path(directory))
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(chain, key)
        proxy = _Proxy(Store(), tls)
        thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            yield GcsServer(proxy, ca)
        finally:
            proxy.shutdown()
            proxy.server_close()


def closed_port_url() -> str:
    """An http://127.0.0.1 URL where nothing listens: a proxy that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
