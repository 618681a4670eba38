"""A local S3 server (moto's) for the remote-storage tests, and a view of what is stored.

The binaries reach it through tensorflow-io's s3:// file system, configured by environment
variables that fail fast: one try per request, short timeouts. The test process itself
looks at the store through boto3, never through TensorFlow: tensorflow-io 0.36 aborts the
teardown of any process that used it (the binaries end before that, see t2tcli.cli.common).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
FAIL_FAST = {
    "AWS_RETRY_MODE": "standard",  # AWS_MAX_ATTEMPTS is read only in this mode
    "AWS_MAX_ATTEMPTS": "1",
    "S3_CONNECT_TIMEOUT_MSEC": "2000",
    "S3_REQUEST_TIMEOUT_MSEC": "20000",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_env(endpoint: str) -> dict[str, str]:
    """What a process needs to reach the server at `endpoint` through s3:// paths."""
    return {**CREDENTIALS, **FAIL_FAST, "S3_ENDPOINT": endpoint, "S3_VERIFY_SSL": "0"}


class FileStore:
    """A file:// root: the store is a local directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.root = f"file://{directory}"
        self.env: dict[str, str] = {}

    def write(self, rel: str, data: bytes) -> None:
        path = self.directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def read(self, rel: str) -> bytes:
        return (self.directory / rel).read_bytes()

    def names(self, rel_dir: str) -> list[str]:
        """Every file below `rel_dir`, by its path relative to it."""
        base = self.directory / rel_dir
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


class S3Store:
    """A bucket on the local S3 server, seen through boto3."""

    def __init__(self, endpoint: str, bucket: str) -> None:
        import boto3

        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.client.create_bucket(Bucket=bucket)
        self.bucket = bucket
        self.root = f"s3://{bucket}"
        self.env = s3_env(endpoint)

    def write(self, rel: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=rel, Body=data)

    def read(self, rel: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=rel)["Body"].read()

    def names(self, rel_dir: str) -> list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        keys = [obj["Key"] for page in pages for obj in page.get("Contents", [])]
        return sorted(k[len(prefix) :] for k in keys if not k.endswith("/"))


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server on a free port of 127.0.0.1 for the block; yields its endpoint."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server on port {port} did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
