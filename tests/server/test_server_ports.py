"""The server's ports and TLS: AEAD-only TLS 1.2, probes and /metrics on their own plain port,
readiness during a drain, and the `serve` flags that set the limits. Real listeners in-process,
real sockets; the raw client is tests/support/rawhttp.py, as for the limit tests.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from tests.support.rawhttp import (
    GPU_POD,
    client_context,
    close,
    closed_by_server,
    connect,
    head,
    read_response,
    refused,
    review,
    running_tls,
)
from tests.support.reviews import review_for
from webhook.server import app as server_app
from webhook.server.http.limits import Limits
from webhook.server.options import ServeOptions
from webhook.server.reload import RuleHolder


def tls12_client(certs: Path, ciphers: str) -> ssl.SSLContext:
    ctx = client_context(certs)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers + ":@SECLEVEL=0")  # offer it even where OpenSSL would not
    return ctx


# The dev certificate has an EC key: ECDSA suites, or the handshake fails for another reason.
@pytest.mark.parametrize(
    "cbc", ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA"]
)
async def test_tls12_refuses_cbc_suites(certs: Path, holder: RuleHolder, cbc: str) -> None:
    async with running_tls(certs, holder) as servers:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            stream = await connect(servers.port, tls12_client(certs, cbc))
            await close(stream)


@pytest.mark.parametrize("aead", ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"])
async def test_tls12_accepts_aead_suites_and_tls13_is_untouched(
    certs: Path, holder: RuleHolder, aead: str
) -> None:
    async with running_tls(certs, holder) as servers:
        stream = await connect(servers.port, tls12_client(certs, aead))
        assert stream[1].get_extra_info("cipher")[0] == aead
        assert (await review(stream))[0] == 200
        await close(stream)
        stream = await connect(servers.port, client_context(certs))
        assert stream[1].get_extra_info("ssl_object").version() == "TLSv1.3"
        await close(stream)


# --- ports ---------------------------------------------------------------------------------------


async def get(port: int, path: str, ctx: ssl.SSLContext | None = None) -> int:
    reader, writer = await connect(port, ctx)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status, _, _ = await read_response(reader)
    writer.close()
    return status


async def test_probes_and_metrics_are_on_the_plain_port_and_reviews_only_on_tls(
    certs: Path, holder: RuleHolder
) -> None:
    ctx = client_context(certs)
    async with running_tls(certs, holder) as servers:
        assert servers.probe_port is not None
        for path in ("/healthz", "/readyz", "/metrics"):
            assert await get(servers.probe_port, path) == 200
            assert await get(servers.port, path, ctx) == 404
        reader, writer = await connect(servers.probe_port, None)
        body = json.dumps(review_for(GPU_POD)).encode()
        writer.write(head(length=len(body)) + body)
        assert (await read_response(reader))[0] == 404  # no review over plain HTTP
        writer.close()


async def test_with_a_client_ca_the_probe_port_still_answers(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder, client_ca=certs / "ca.crt") as servers:
        assert servers.probe_port is not None
        assert await get(servers.probe_port, "/readyz") == 200
        assert await get(servers.probe_port, "/healthz") == 200
        assert await refused(servers.port, client_context(certs))  # no client certificate


async def test_readiness_fails_once_draining_and_answers_say_connection_close(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder) as servers:
        assert servers.probe_port is not None
        stream = await connect(servers.port, client_context(certs))
        assert (await review(stream))[1].get("connection") != "close"
        servers.state.draining = True
        assert await get(servers.probe_port, "/readyz") == 503
        assert await get(servers.probe_port, "/healthz") == 200
        status, fields, _ = await review(stream)
        assert status == 200 and fields["connection"] == "close"
        assert await closed_by_server(stream[0])
        stream[1].close()


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--header-timeout", "-1", "must be > 0"),
        ("--body-timeout", "nan", "must be > 0"),
        ("--max-connections", "1.5", "not an integer"),
        ("--probe-port", "70000", "not a TCP port"),
        ("--drain-seconds", "soon", "not a number"),
    ],
)
def test_a_bad_limit_flag_is_refused_with_a_reason(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: {says}" in capsys.readouterr().err


def test_the_serve_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.cli import main

    seen: list[ServeOptions] = []
    monkeypatch.setattr(server_app, "serve", seen.append)
    monkeypatch.setattr("webhook.logs.setup", lambda level, fmt: None)  # leave pytest's logging
    argv = ["serve", "--no-cluster", "--max-body-mib", "2", "--body-memory-mib", "16"]
    argv += ["--max-connections", "9", "--header-timeout", "3", "--body-timeout", "4"]
    argv += ["--idle-timeout", "50", "--probe-port", "0", "--hold-seconds", "0"]
    assert main([*argv, "--drain-seconds", "0.5", "--no-release-memory"]) == 0
    assert seen[-1].limits == Limits(
        max_body=2 * 1024 * 1024,
        body_memory=16 * 1024 * 1024,
        max_connections=9,
        header_timeout=3.0,
        body_timeout=4.0,
        idle_timeout=50.0,
    )
    assert seen[-1].separate_probe_port is None  # 0: probes and /metrics on the HTTPS port
    options = seen[-1]
    assert (options.drain_seconds, options.hold_seconds, options.release_memory) == (0.5, 0, False)
    assert main(["serve", "--no-cluster"]) == 0
    options = seen[-1]
    assert (options.separate_probe_port, options.limits, options.release_memory) == (
        8081,
        Limits(),
        True,
    )
