"""Listening on an address, said in one line when it cannot be had.

`a2rl serve --http` and `a2rl view` bind before they print where they serve: a port in use, a
host that does not resolve or is not this machine's is one `cannot listen on HOST:PORT: why`
line, not a "serving ..." line followed by the web server's own error.
"""

from __future__ import annotations

import socket

#: `a2rl view`'s default port: `a2rl serve --http` has 8765 (the http_port setting), and both
#: run side by side
VIEW_PORT = 8766
PORT_MIN, PORT_MAX = 1, 65535


class ListenError(OSError):
    """The address cannot be listened on; the message is the line to show."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on (host, port), of the family the host resolves to (IPv4 or 6)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not PORT_MIN <= port <= PORT_MAX:
        raise ListenError(f"cannot listen on {where}: a port is {PORT_MIN} to {PORT_MAX}")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise ListenError(f"cannot listen on {where}: {exc.strerror or exc}") from None


def check_listen(host: str, port: int) -> None:
    """Raise `ListenError` unless (host, port) can be listened on now."""
    listen(host, port).close()
