"""The wrk load client of bench/load.py (`--client wrk`, the default where wrk is installed).

wrk is a C HTTP benchmarking tool: an independent client, not written here and not in Python,
so a server number it reads cannot be an artefact of our own client (a Python client on one
core tops out near the bare aiohttp floor, which would hide how far below it the webhook is).
It runs in the client worker process and inherits its core. A Lua script sends the scenario's
AdmissionReview with a fresh uid spliced in at every UID_MARK, as the other clients do, and
prints wrk's totals and latency percentiles as one JSON line when done.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from reviews import UID_MARK

# wrk's Lua: `setup` numbers the threads, `request` builds each request (a new uid: the tag,
# the thread, a counter, shaped like the other clients' uids), `done` prints the totals.
_SCRIPT = """
local body, path, tag = nil, nil, 0
local headers = {}
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end
function init(args)
  local f = assert(io.open(args[1], "rb"))
  body = f:read("*a")
  f:close()
  path = args[2]
  tag = tonumber(args[3])
  local h = assert(io.open(args[4], "rb"))
  for line in h:lines() do
    local k, v = line:match("^([^:]+): (.*)$")
    if k then headers[k] = v end
  end
  h:close()
end
local n = 0
function request()
  n = n + 1
  local uid = string.format("%08x-%04x-4000-8000-%012x", tag, thread_id or 0, n)
  return wrk.format("POST", path, headers, (body:gsub("MARK", uid)))
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"status_errors":%d,"socket_errors":%d,'
    .. '"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
""".replace("MARK", UID_MARK)


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _wrk(
    args: list[str], url: str, files: tuple[Path, str, int, Path], seconds: int
) -> dict[str, Any]:
    body, path, tag, headers = files
    cmd = ["wrk", *args, "-d", f"{seconds}s", "-s", str(files[0].parent / "review.lua"), url]
    cmd += ["--", str(body), path, str(tag), str(headers)]
    out = subprocess.run(cmd, capture_output=True, timeout=seconds + 30, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(b"{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.decode()[-500:]}")
    result: dict[str, Any] = orjson.loads(lines[-1])
    return result


def drive_wrk(spec: dict[str, Any], t_start: float, t_end: float) -> dict[str, Any]:
    """A warm-up run now, then the measured run from `t_start` for the window's whole
    seconds; the result in the shape of the other clients' (with percentiles instead of
    every latency, which wrk keeps to itself)."""
    from clients import APISERVER_HEADERS

    threads = max(1, int(spec.get("threads", 1)))
    concurrency = max(threads, int(spec["concurrency"]))
    args = ["-t", str(threads), "-c", str(concurrency), "--timeout", "10s"]
    url = f"https://127.0.0.1:{spec['port']}{spec['path']}"
    with tempfile.TemporaryDirectory(prefix="gpu-admission-wrk-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "review.lua").write_text(_SCRIPT)
        (tmp / "body.json").write_bytes(spec["body"].encode())
        headers = {**APISERVER_HEADERS, "Accept-Encoding": "gzip"}
        (tmp / "headers.txt").write_text("".join(f"{k}: {v}\n" for k, v in headers.items()))
        files = (tmp / "body.json", spec["path"], int(spec["tag"]), tmp / "headers.txt")
        warmup = int(t_start - time.monotonic() - 0.2)  # wrk counts whole seconds
        if warmup >= 1:
            _wrk(args, url, files, warmup)
        time.sleep(max(0.0, t_start - time.monotonic()))
        seconds = max(1, round(t_end - t_start))
        begun = time.monotonic()
        got = _wrk(args, url, files, seconds)
    failed = got["status_errors"] + got["socket_errors"]
    return {
        "ok": got["requests"] - got["status_errors"],
        "errors": failed,
        "issued": got["requests"],
        "finished": begun + got["duration_us"] / 1e6,
        "samples": [{"kind": "wrk", **got}] if failed else [],
        "p50_us": got["p50_us"],
        "p99_us": got["p99_us"],
    }
