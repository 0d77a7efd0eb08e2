"""An OpenAI-style streaming server that answers instantly, for load-generator benchmarks.

Run as a script: binds 127.0.0.1 on an ephemeral port, prints the port, serves until killed.
One SSE chunk per requested token, then a usage chunk and [DONE].
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    n = int(body["max_tokens"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(n):
        chunk = {"choices": [{"index": 0, "text": " t", "finish_reason": "length" if i == n - 1 else None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"choices": [], "usage": {"completion_tokens": n}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    return resp


async def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
