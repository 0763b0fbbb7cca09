"""A TCP proxy on loopback that a test can take away and bring back: what a database host
looks like to Onlooker when its network or the server goes away (connections reset, new ones
refused) and when it returns (on the same address).

    with TcpProxy(("127.0.0.1", 5432)) as proxy:   # listening on proxy.port
        ...
        proxy.take_away()      # every connection reset, the port refuses
        proxy.bring_back()     # the same port accepts and forwards again
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from types import TracebackType

from tests.processes import free_port


class TcpProxy:
    def __init__(self, target: tuple[str, int], *, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None

    def __enter__(self) -> TcpProxy:
        self.bring_back()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.take_away()

    def bring_back(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def take_away(self) -> None:
        """Refuse new connections and reset every open one (RST, as a host that went away
        answers once it is back, or a firewall that rejects)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown wakes the accepting thread, which then closes the listener itself.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._accepting is not None:
            self._accepting.join(timeout=5)
            self._accepting = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                # A zero linger makes close send RST rather than FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # taken away meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        peer = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as selector:
            for sock in peer:
                sock.setblocking(True)
                selector.register(sock, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    try:
                        data = key.fileobj.recv(65536)
                        if data:
                            peer[key.fileobj].sendall(data)
                            continue
                    except OSError:
                        pass
                    with self._lock:
                        self._sockets.difference_update(peer)
                    for sock in peer:
                        with contextlib.suppress(OSError):
                            sock.close()
                    return
