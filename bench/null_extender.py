"""An extender that does nothing: the floor of what any extender costs kube-scheduler on this machine.

``python -m bench.null_extender --port N`` answers every request at once without reading it (``POST``: ``[]``, no
node scored; ``GET``: ``ok``), framed by httptools on asyncio, one process, as ``lyra extender`` serves. The
scheduling benchmark runs it as a third kind of run: the gap between it and no extender is what one HTTP round trip
per pod costs (kube-scheduler encoding the pod and the node names, loopback, the answer), the gap between it and
Lyra's extender what Lyra's scoring and view cost on top.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import httptools

_EMPTY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n[]"
_OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n"


class _Answering(asyncio.Protocol):
    """Each request answered when its last byte arrives, keep-alive."""

    def __init__(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_message_complete(self) -> None:
        if self._transport is not None:
            self._transport.write(_EMPTY if self._parser.get_method() == b"POST" else _OK)


async def _serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Answering, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args.port))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
