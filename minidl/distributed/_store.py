"""A key-value store at MASTER_ADDR:MASTER_PORT, for the rendezvous (torch.distributed's TCPStore, smaller).

Rank 0 serves it from a thread; every rank (rank 0 too) connects to it as a client. It carries the few bytes
the processes must agree on before they can talk through NCCL, the communicator's unique id, and nothing
else: the collectives themselves run through NCCL or MPI. The transport is the standard library's
multiprocessing.connection (length-prefixed pickles over TCP, with an authentication handshake).
"""
from __future__ import annotations

import threading
import time
from multiprocessing.connection import Client, Listener

_AUTHKEY = b"minidl.distributed"   # a handshake so a stray connection is refused; not a security boundary


class TCPStore:
    """set(key, value) and get(key), which waits until some rank has set the key (or the timeout passes)."""

    def __init__(self, host: str, port: int, is_master: bool, timeout: float = 300.0):
        self.host, self.port, self.timeout = host, int(port), float(timeout)
        self._server = None
        if is_master:
            self._server = _Server(host, self.port)
        self._conn = self._connect()
        self._lock = threading.Lock()

    def _connect(self):
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return Client((self.host, self.port), authkey=_AUTHKEY)
            except (ConnectionRefusedError, OSError) as exc:   # rank 0 may not be listening yet
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"minidl.distributed: could not reach the store at {self.host}:{self.port} within "
                        f"{self.timeout:.0f} s ({exc}); is rank 0 running, and are MASTER_ADDR and MASTER_PORT "
                        "the same on every rank?") from None
                time.sleep(0.05)

    def _ask(self, *request):
        with self._lock:
            self._conn.send(request)
            status, value = self._conn.recv()
        if status != "ok":
            raise TimeoutError(value)
        return value

    def set(self, key: str, value) -> None:
        self._ask("set", key, value)

    def get(self, key: str):
        return self._ask("get", key, self.timeout)

    def add(self, key: str, amount: int) -> int:
        """Add to an integer counter (0 when unset) and return the new value."""
        return self._ask("add", key, int(amount))

    def close(self):
        try:
            self._conn.close()
        finally:
            if self._server is not None:
                self._server.close()


class _Server:
    def __init__(self, host, port):
        try:
            self._listener = Listener((host, port), authkey=_AUTHKEY)
        except OSError as exc:
            raise RuntimeError(
                f"minidl.distributed: rank 0 cannot listen on {host}:{port} ({exc}); choose another "
                "MASTER_PORT (the launcher's --master-port)") from None
        self._data: dict = {}
        self._cond = threading.Condition()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="minidl-store").start()

    def _accept(self):
        while not self._closed:
            try:
                conn = self._listener.accept()
            except Exception:          # closed, or a connection that failed the handshake
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            op, key = request[0], request[1]
            with self._cond:
                if op == "set":
                    self._data[key] = request[2]
                    self._cond.notify_all()
                    reply = ("ok", None)
                elif op == "add":
                    self._data[key] = self._data.get(key, 0) + request[2]
                    self._cond.notify_all()
                    reply = ("ok", self._data[key])
                else:   # get: wait for the key
                    found = self._cond.wait_for(lambda: key in self._data, timeout=request[2])
                    reply = ("ok", self._data[key]) if found else (
                        "timeout", f"minidl.distributed: no rank set {key!r} in the store within {request[2]:.0f} s")
            try:
                conn.send(reply)
            except OSError:
                return

    def close(self):
        self._closed = True
        self._listener.close()
