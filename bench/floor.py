"""The floor server of bench/load.py: a bare aiohttp TLS server that answers a constant.

`load.py --floor-server PORT CERT KEY` runs it in a child process: what HTTPS + aiohttp alone
cost, the throughput the webhook's own numbers are compared with.
"""

from __future__ import annotations

import ssl

FLOOR_ANSWER = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"","allowed":true}}'
)


def run_floor_server(port: int, cert: str, key: str) -> int:
    """Bare aiohttp over TLS on uvloop: read the body, answer a constant. Nothing else."""
    import uvloop
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=FLOOR_ANSWER, content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/mutate", answer)
    app.router.add_post("/validate", answer)
    app.router.add_get("/healthz", healthz)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        ssl_context=ctx,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )
    return 0
