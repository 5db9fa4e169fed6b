"""A deadline for a request's headers: uvicorn (0.35) starts no timer on a new connection,
and one whose request line and headers never end holds its socket and memory for good (3,000
half-open connections stayed open on the red team's server, issue 47). Each connection that
waits for a request's headers, the first or one after a finished response, is closed
`serve_header_timeout_s` after its wait began (it opened, or its last response ended),
however slowly bytes trickle in; a request whose headers arrived is left to the body's
timeout (`guard.py`) and to its route."""

from __future__ import annotations

import asyncio
from typing import Any, Optional


def protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools, else h11), closing a connection whose request
    headers have not all come `timeout_s` seconds after it began to wait for them."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class HeaderDeadline(base):
        _header_timer: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._arm()
            super().data_received(data)
            if not self._between_requests():  # its headers are all here: a request runs
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()
            if not self.transport.is_closing():
                self._arm()  # the wait for the next request's headers begins

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _between_requests(self) -> bool:
            cycle = getattr(self, "cycle", None)
            return cycle is None or bool(cycle.response_complete)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(timeout_s, self._expired)

        def _expired(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()  # its headers never all came

    HeaderDeadline.__name__ = f"HeaderDeadline{base.__name__}"
    return HeaderDeadline
