"""The fence every socket of a serving client goes through: ``make_client`` gives an httpx client whose sockets are
read and written in short slices (``SLICE_S``), each first checking the cancel flag, the client's deadline, the
deadline of the request running on this thread (``RequestDeadline``) and, for a fenced client (class mode's list of
servers), that the target is the one allowed (host, port). So a request ends on time however slowly a server drips
bytes, and a fenced client connects nowhere else."""
from __future__ import annotations

import errno
import math
import os
import select
import socket
import threading
import time

import httpcore2
import httpx2 as httpx

from engine.serving.config import SLICE_S, ServerConfig, ssl_context
from engine.serving.errors import BadURL, RequestCancelled, ServerTimeout

_LOCAL = threading.local()  # .deadline: time.monotonic() by which the request on this thread must end


class Fence:
    """What every socket operation of one client checks between slices of at most ``SLICE_S``: the cancel flag,
    the client's total deadline (a sweep's cap), the deadline of the request running on this thread, and (for
    a fenced client) that the target is the one allowed (host, port)."""

    def __init__(self, cancel: threading.Event | None = None, deadline: float | None = None,
                 allowed: frozenset | None = None, what: str = "the server"):
        self.cancel, self.deadline, self.allowed, self.what = cancel, deadline, allowed, what

    def remaining(self) -> float:
        """Seconds left before the nearest deadline (inf if none); raises if cancelled or already past one."""
        if self.cancel is not None and self.cancel.is_set():
            raise RequestCancelled("Cancelled.")
        now = time.monotonic()
        left = math.inf
        if self.deadline is not None:
            left = self.deadline - now
            if left <= 0:
                raise ServerTimeout(f"Stopped: the time allowed for this measurement ran out while waiting for "
                                    f"{self.what}.")
        mine = getattr(_LOCAL, "deadline", None)
        if mine is not None:
            if mine - now <= 0:
                raise ServerTimeout(f"The request to {self.what} ran past its total time limit; stopped it.")
            left = min(left, mine - now)
        return left

    def check_target(self, host: str, port: int) -> None:
        if self.allowed is not None and (str(host).lower().strip("[]"), int(port)) not in self.allowed:
            raise BadURL("This address is not on this server's list of serving engines; nothing was sent to it.")


class _Stream(httpcore2.NetworkStream):
    """A socket read and written in short slices, each one first asking the fence whether to go on."""

    def __init__(self, sock: socket.socket, fence: Fence):
        self._sock, self._fence = sock, fence

    def _slice(self, timeout: float | None, end: float | None) -> float:
        left = self._fence.remaining()
        if end is not None:
            left = min(left, end - time.monotonic())
        if left <= 0:
            raise socket.timeout()
        return min(SLICE_S, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._sock.settimeout(self._slice(timeout, end))
            except socket.timeout:
                raise httpcore2.ReadTimeout("read timed out") from None
            try:
                return self._sock.recv(max_bytes)
            except socket.timeout:
                continue
            except OSError as exc:
                raise httpcore2.ReadError(str(exc)) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        view = memoryview(buffer)
        while view:
            try:
                self._sock.settimeout(self._slice(timeout, end))
            except socket.timeout:
                raise httpcore2.WriteTimeout("write timed out") from None
            try:
                view = view[self._sock.send(view):]
            except socket.timeout:
                continue
            except OSError as exc:
                raise httpcore2.WriteError(str(exc)) from None

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        try:
            self._sock.settimeout(min(timeout or 10.0, max(0.01, self._fence.remaining())))
            tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
        except socket.timeout:
            self.close()
            raise httpcore2.ConnectTimeout("TLS handshake timed out") from None
        except OSError as exc:
            self.close()
            raise httpcore2.ConnectError(str(exc)) from None
        except BaseException:
            self.close()
            raise
        return _Stream(tls, self._fence)

    def get_extra_info(self, info: str):
        if info == "ssl_object":
            return getattr(self._sock, "_sslobj", None)
        if info == "socket":
            return self._sock
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "is_readable":
            try:
                return bool(select.select([self._sock], [], [], 0)[0])
            except (OSError, ValueError):
                return True
        return None


class _Backend(httpcore2.NetworkBackend):
    """Connections that check the fence first (target, cancel, deadlines) and connect without blocking for more
    than a slice, so a closed tab ends even a connect to a host that never answers."""

    def __init__(self, fence: Fence):
        self.fence = fence

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.fence.check_target(host, port)
        self.fence.remaining()
        end = time.monotonic() + (timeout if timeout is not None else 30.0)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise httpcore2.ConnectError(f"name not resolved: {exc}") from None
        last: Exception | None = None
        for family, kind, proto, _, addr in infos[:4]:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                err = sock.connect_ex(addr)
                while err in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
                    left = min(self.fence.remaining(), end - time.monotonic())
                    if left <= 0:
                        raise httpcore2.ConnectTimeout("connect timed out")
                    if select.select([], [sock], [], min(SLICE_S, left))[1]:
                        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return _Stream(sock, self.fence)
            except OSError as exc:
                sock.close()
                last = exc
            except BaseException:
                sock.close()
                raise
        raise httpcore2.ConnectError(str(last) if last else "no address to connect to")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore2.ConnectError("unix sockets are not used here")

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(SLICE_S, left, max(0.0, self.fence.remaining())))


def make_client(cfg: ServerConfig, max_connections: int = 64, *, cancel: threading.Event | None = None,
                deadline: float | None = None) -> httpx.Client:
    """A client whose every socket goes through a ``Fence``: ``cancel``, ``deadline`` (time.monotonic()) for all
    its requests together, and, for a fenced config, only the config's own host and port. No redirects are
    followed, no proxy or environment setting is read."""
    fence = Fence(cancel, deadline, frozenset({cfg.host_port()}) if cfg.fenced else None, cfg.where)
    transport = httpx.HTTPTransport(verify=ssl_context(), trust_env=False, retries=0,
                                    limits=httpx.Limits(max_connections=max_connections,
                                                        max_keepalive_connections=max_connections))
    transport._pool._network_backend = _Backend(fence)  # httpx2 takes no backend argument; the pool does
    return httpx.Client(timeout=cfg.timeout(), headers=cfg.headers(), trust_env=False, follow_redirects=False,
                        transport=transport)




class RequestDeadline:
    """``with RequestDeadline(s):`` every socket operation on this thread ends by now + s (nested: the nearer)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self):
        self.prev = getattr(_LOCAL, "deadline", None)
        mine = time.monotonic() + self.seconds
        _LOCAL.deadline = mine if self.prev is None else min(self.prev, mine)
        return self

    def __exit__(self, *exc):
        _LOCAL.deadline = self.prev
        return False
