"""The witness's HTTP face (`gateway audit witness`, audit/integrity/witness.py): POST /add-checkpoint as
C2SP tlog-witness has it, GET /checkpoint?origin=... for the latest cosigned note, GET /healthz.

Its three settings come from the environment `gateway audit witness` sets for it, read once:
GATEWAY_WITNESS_STATE (its state directory), GATEWAY_WITNESS_LOG_KEY (the gateway's public key, PEM
or verifier key) and GATEWAY_WITNESS_KEY (its own Ed25519 private key, PEM)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from audit.integrity import MAX_BODY, Witness, load_signer, load_verifier, witness_signer


def create_witness_app(witness: Witness) -> Starlette:
    async def add_checkpoint(request: Request) -> Response:
        body = b""  # read up to MAX_BODY only: anyone who reaches the witness may send anything
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return PlainTextResponse("body too large\n", status_code=413)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return PlainTextResponse("body: not UTF-8\n", status_code=400)
        answer = await anyio.to_thread.run_sync(witness.add_checkpoint, text)
        media = "text/x.tlog.size" if answer.status == 409 else "text/plain"
        return PlainTextResponse(answer.text, status_code=answer.status, media_type=media)

    async def checkpoint(request: Request) -> Response:
        origin = request.query_params.get("origin", "")
        if not origin or set(request.query_params) != {"origin"}:
            return PlainTextResponse("origin: expected ?origin=<the checkpoint's first line>\n", status_code=400)
        found = witness.latest(origin)
        if found is None:
            return PlainTextResponse("no checkpoint of this origin was cosigned here\n", status_code=404)
        return PlainTextResponse(found)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return Starlette(
        routes=[
            Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/checkpoint", checkpoint, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def app() -> Starlette:
    """The uvicorn factory (`gateway audit witness`)."""
    signer = witness_signer(load_signer(Path(os.environ["GATEWAY_WITNESS_KEY"])))
    return create_witness_app(
        Witness(Path(os.environ["GATEWAY_WITNESS_STATE"]), load_verifier(Path(os.environ["GATEWAY_WITNESS_LOG_KEY"])), signer)
    )
