"""The wrk load client of bench/load.py (`--client wrk`, the default where wrk is installed).

wrk is a C HTTP benchmarking tool: an independent client, not written here and not in Python,
so a server number it reads cannot be an artefact of our own client (a Python client on one
core tops out near the bare aiohttp floor, which would hide how far below it the webhook is).
It runs in the client worker process and inherits its core. A Lua script sends the scenario's
AdmissionReview with a fresh uid spliced in at every UID_MARK, as the other clients do, and
prints wrk's totals and latency percentiles as one JSON line when done.
"""

from __future__ import annotations

import os
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
) -> tuple[dict[str, Any], int, float]:
    """One wrk run: its totals, its pid and the CPU seconds it used (from its rusage)."""
    body, path, tag, headers = files
    cmd = ["wrk", *args, "-d", f"{seconds}s", "-s", str(files[0].parent / "review.lua"), url]
    cmd += ["--", str(body), path, str(tag), str(headers)]
    out_path, err_path = body.parent / "wrk.out", body.parent / "wrk.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in out_path.read_bytes().splitlines() if ln.startswith(b"{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {err_path.read_text()[-500:]}")
    result: dict[str, Any] = orjson.loads(lines[-1])
    return result, proc.pid, usage.ru_utime + usage.ru_stime


def drive_wrk(spec: dict[str, Any], t_start: float, t_end: float) -> dict[str, Any]:
    """A warm-up run now, then the measured run from `t_start` for the window's whole
    seconds; the result in the shape of the other clients', with wrk's percentiles (it keeps
    every latency to itself) and the CPU snapshots that bracket the measured run: taken here,
    around wrk's own life, they hold exactly the requests counted however late it started."""
    from clients import APISERVER_HEADERS
    from cpustat import CpuSnapshot

    threads = max(1, int(spec.get("threads", 1)))
    concurrency = max(threads, int(spec["concurrency"]))
    args = ["-t", str(threads), "-c", str(concurrency), "--timeout", "10s"]
    url = f"https://127.0.0.1:{spec['port']}{spec['path']}"
    watch = [int(p) for p in spec.get("watch", ())] + [os.getpid()]
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
        before = CpuSnapshot.take(watch)
        got, pid, seconds_used = _wrk(args, url, files, max(1, round(t_end - t_start)))
        after = CpuSnapshot.take(watch)
    # wrk itself, born after `before` and gone before `after`: its rusage is its CPU.
    before.procs[pid], after.procs[pid] = 0.0, seconds_used
    failed = got["status_errors"] + got["socket_errors"]
    return {
        "ok": got["requests"] - got["status_errors"],
        "errors": failed,
        "issued": got["requests"],
        "finished": after.at,
        "samples": [{"kind": "wrk", **got}] if failed else [],
        "p50_us": got["p50_us"],
        "p99_us": got["p99_us"],
        "client_pid": pid,
        "cpu": [snap.to_json() for snap in (before, after)],
    }
