"""A review of a large object is decided off the event loop: while the worst shape a tenant can
post is being computed, the probe port and small reviews keep being answered.

Ordered, never timed: the test counts what was answered between the large review's last byte
and its answer. Answered on the loop, that was nothing (every probe waited for the review).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import ROOT
from tests.support.rawhttp import connect, post, read_response, review_body, running_plain
from tests.support.reviews import review_for
from tests.support.webhook import Webhook, start_webhook, stop_webhook
from webhook.server.http.limits import Limits
from webhook.server.http.offload import OFFLOAD_BODY
from webhook.server.reload import RuleHolder

VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def worst_daemonset(containers: int) -> dict[str, Any]:
    """A DaemonSet whose every container has two denials with node-agent advice."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "ml-team"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": f"c{i}",
                            "image": "example.com/agent:1",
                            "securityContext": {"privileged": True},
                            "env": [{"name": VISIBLE, "value": "all"}],
                        }
                        for i in range(containers)
                    ],
                },
            },
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(certs: Path, tmp_path: Path) -> Iterator[tuple[Webhook, int]]:
    """The real server, with its probes on their own plain-HTTP port (its log in
    tmp_path/server.log)."""
    probe_port = free_port()
    hook = start_webhook(certs, ROOT / "rules", tmp_path / "server.log", probe_port=probe_port)
    yield hook, probe_port
    stop_webhook(hook)


def _post_raw(
    port: int, ca: Path, body: bytes, sent: threading.Event, answering: threading.Event
) -> bytes:
    """One review over its own TLS connection: `sent` is set once its last byte is written,
    `answering` once the first byte of its answer is in; the answer's body is returned."""
    ctx = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        head = (
            "POST /validate?timeout=30s HTTP/1.1\r\nHost: gpu-admission\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        tls.sendall(head + body)
        sent.set()
        tls.settimeout(120)
        data = tls.recv(65536)
        answering.set()
        while b"\r\n\r\n" not in data:
            data += tls.recv(65536)
        head_part, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head_part.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += tls.recv(65536)
        return rest


def test_probes_and_small_reviews_are_answered_while_a_worst_shape_review_is_computed(
    served: tuple[Webhook, int], certs: Path
) -> None:
    hook, probe_port = served
    big = review_for(worst_daemonset(48_000))
    body = json.dumps(big, separators=(",", ":")).encode()
    assert 6 * 2**20 < len(body) < 8 * 2**20  # past what the apiserver sends, within the limit
    port = int(hook.url.rsplit(":", 1)[1])
    sent, answering = threading.Event(), threading.Event()
    answer: list[bytes] = []
    worker = threading.Thread(
        target=lambda: answer.append(_post_raw(port, certs / "ca.crt", body, sent, answering)),
        daemon=True,
    )
    worker.start()
    assert sent.wait(60)
    probes = reviews = 0
    small = worst_daemonset(2)
    with httpx.Client(timeout=60) as probe:
        while not answering.is_set():
            answered = probe.get(f"http://127.0.0.1:{probe_port}/healthz")
            reviewed = hook.validate(small)
            if answering.is_set():
                break  # the large answer may have come first: count only what came before it
            assert answered.status_code == 200 and not reviewed.allowed
            probes, reviews = probes + 1, reviews + 1
    worker.join()
    decided = json.loads(answer[0])["response"]
    assert decided["uid"] == big["request"]["uid"] and not decided["allowed"]
    message = decided["status"]["message"]
    assert message.endswith("95980 more denials not shown (gpu-admission audit lists every one)")
    # Each round trip takes a few turns of the loop; the largest review, far longer than three.
    # Decided on the loop, nothing was answered until it was done.
    assert probes >= 3 and reviews >= 3, (probes, reviews)


async def test_a_review_pipelined_behind_a_large_one_is_answered_after_it(
    holder: RuleHolder,
) -> None:
    big = review_for(worst_daemonset(1_000))
    big_body = json.dumps(big).encode()
    assert len(big_body) > OFFLOAD_BODY
    async with running_plain(holder, Limits(idle_timeout=10)) as servers:
        reader, writer = await connect(servers.port)
        small, uid = review_body("after")
        writer.write(post(big_body) + post(small))  # one write: the second waits on the first
        first = await read_response(reader)
        second = await read_response(reader)
        assert first[0] == second[0] == 200
        assert json.loads(first[2])["response"]["uid"] == big["request"]["uid"]
        assert json.loads(second[2])["response"]["uid"] == uid
        # The connection stays usable: reading resumed after the large answer.
        writer.write(post(small))
        third = await read_response(reader)
        assert json.loads(third[2])["response"]["uid"] == uid
        writer.close()


async def test_a_review_whose_client_leaves_while_it_waits_gives_its_budget_back(
    holder: RuleHolder,
) -> None:
    """A large review still waiting for the worker when its connection goes is never decided,
    and the body budget it drew on (bodies over 128 KiB) is given back at once."""
    big = review_for(worst_daemonset(3_000))
    body = json.dumps(big).encode()
    assert len(body) > 128 * 1024
    async with running_plain(holder, Limits(idle_timeout=10)) as servers:
        first = await connect(servers.port)
        gone = await connect(servers.port)
        first[1].write(post(body))
        gone[1].write(post(body))
        await gone[1].drain()
        # Both heads read, both bodies' budget drawn: the second waits behind the first.
        deadline = time.monotonic() + 15
        while servers.state.body_bytes < 2 * len(body):
            assert time.monotonic() < deadline, servers.state.body_bytes
            await asyncio.sleep(0.01)
        gone[1].transport.abort()
        status, _, answer = await read_response(first[0])
        assert status == 200 and json.loads(answer)["response"]["uid"] == big["request"]["uid"]
        for _ in range(100):
            if servers.state.body_bytes == 0:
                break
            await asyncio.sleep(0.05)
        assert servers.state.body_bytes == 0
        first[1].close()


def test_a_decision_log_line_names_at_most_100_findings(
    served: tuple[Webhook, int], tmp_path: Path
) -> None:
    """The line is written on the event loop: a pod of thousands of findings would make it
    megabytes long (and the loop wait for it). The rest are counted."""
    hook, _ = served
    assert not hook.validate(worst_daemonset(80)).allowed  # 160 findings
    log = tmp_path / "server.log"
    line: dict[str, Any] = {}
    for _ in range(100):
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        found = [x for x in lines if x.get("event") == "admission"]
        if found:
            line = found[-1]
            break
        time.sleep(0.05)
    assert len(line["findings"]) == 100 and line["findingsNotShown"] == 60
    assert line["msg"].endswith(", privileged-gpu=enforce and 60 more"), line["msg"][-80:]
