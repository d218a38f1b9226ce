"""How many bytes a client has accepted: the kernel's count for the connection a request came on.

It is read while a response streams (`app.http.sending`): a client that acknowledges nothing while bytes wait for it
is stalled, at whatever speed the server makes them. Why not time uvicorn's sends alone: a send waits while the
socket is not writable, and Linux makes a socket writable again only once a third of its send queue is free. On
loopback that queue grows to ``tcp_wmem``'s 4 MB whatever the client reads, so a client reading steadily at 50 KB/s
(real-time PCM) made no send return for 20 s. The kernel's ``tcpi_bytes_acked`` (``TCP_INFO``) counts what the
client's TCP took, byte by byte. ASGI hands the app no socket, so the connection is found by its two addresses among
the process's sockets, once per response.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import struct
import termios

import psutil

log = logging.getLogger(__name__)

_BYTES_ACKED = 120
"""Offset of ``tcpi_bytes_acked`` (u64) in Linux's ``struct tcp_info`` (since Linux 4.1)."""
_TCP_INFO_SIZE = 136


class Progress:
    """A duplicate of the server's socket for one connection; `acked` reads the kernel's count."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    @classmethod
    def find(cls, server: tuple[str, int] | None, client: tuple[str, int] | None) -> Progress | None:
        """The connection from ``client`` to ``server`` (the ASGI scope's addresses); None where not found."""
        if server is None or client is None or not hasattr(socket, "TCP_INFO"):
            return None
        try:
            for conn in psutil.Process().net_connections(kind="tcp"):
                if conn.fd >= 0 and conn.laddr and conn.raddr and (conn.laddr.ip, conn.laddr.port) == tuple(server) \
                        and (conn.raddr.ip, conn.raddr.port) == tuple(client):
                    found = cls(socket.socket(fileno=os.dup(conn.fd)))
                    found.acked()
                    return found
        except (OSError, psutil.Error, struct.error) as exc:
            log.debug("no byte count for %s: %s", client, exc)
        return None

    def acked(self) -> int:
        info = self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
        value: int = struct.unpack_from("Q", info, _BYTES_ACKED)[0]
        return value

    def unacked(self) -> int:
        """Bytes in the connection's send queue the client has not acknowledged (``SIOCOUTQ``, Linux's
        ``TIOCOUTQ`` on a TCP socket)."""
        found = fcntl.ioctl(self._sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
        value: int = struct.unpack("i", found)[0]
        return value

    def drop(self) -> None:
        """End the connection now, unsent bytes and all (a reset), instead of waiting for a client that
        does not read to take them: the kernel's buffers and the file descriptor are freed at once."""
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self._sock.close()
