"""An httpx transport over a network backend of the caller's choosing.

httpx's own transport cannot be given a network backend (encode/httpx#3749 proposes it), and
Onlooker needs two: calls to agents keep a deadline in every socket wait (agent_http), and
notification channels connect only to addresses checked public (notify.targets). So this
transport hands requests to an httpcore connection pool over the backend it is given, and
httpcore's errors back under httpx's names, as the callers expect; an error of the backend's
own (targets.Refused) passes through unchanged.

Unlike httpx.HTTPTransport it takes no proxy: a client given a transport of its own reads no
proxy from the environment either, and must not (a proxy would make the connections, not the
backend). It speaks HTTP/1.1 only, with no retries, and takes an SSL context rather than
`verify`/`cert` (by default httpx's, which honours SSL_CERT_FILE and SSL_CERT_DIR).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore
import httpx


class Transport(httpx.BaseTransport):
    def __init__(
        self,
        network_backend: httpcore.NetworkBackend,
        *,
        max_connections: int,
        keepalive_expiry: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if ssl_context is None:
            ssl_context = httpx.create_ssl_context()
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=network_backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        sent = httpcore.Request(
            request.method,
            httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            answer = self._pool.handle_request(sent)
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=_ReplyStream(answer),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class _ReplyStream(httpx.SyncByteStream):
    def __init__(self, answer: httpcore.Response) -> None:
        self._answer = answer

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._answer.stream

    def close(self) -> None:
        with _as_httpx_errors():
            self._answer.close()


# httpcore's errors and httpx's names for them, the most specific first.
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as error:
        for theirs, ours in _HTTPX_ERRORS:
            if isinstance(error, theirs):
                raise ours(str(error)) from error
        raise
