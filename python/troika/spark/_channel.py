"""The channel between troika.spark's driver and its Spark tasks: one TCP connection per task
to a small server in the driver, authenticated by the job's random key (which reaches the tasks
inside the Spark closure, as Horovod's key does: turn on Spark's RPC encryption to keep it
secret on the wire).

A task sends newline-delimited JSON messages, the first one its hello:
  {"key": K, "index": I, "attempt": A}       who it is (partition, task attempt)
  {"kind": "running", "rank": R}              its rank's process started (the agent admitted it)
  {"kind": "line", "stream": "stdout"|"stderr", "rank": R or null, "text": T}
  {"kind": "outcome", "ok": bool, "rank": R, "value": base64 cloudpickle, "error": T}
The driver may answer one line, {"kind": "stop"}, when the job is over without that task (an
elastic joiner never admitted): the task then stops its agent.

Thread contract: DriverChannel is thread-safe (one thread per connection calls the listener);
TaskChannel.send is thread-safe."""

import base64
import hmac
import json
import socket
import threading


class DriverChannel:
    """The server in the driver. `listener(index, attempt, message)` is called for each message
    after the hello, on the connection's thread; a connection whose hello has not the key is
    closed unread."""

    def __init__(self, ip, key, listener):
        self._key = key
        self._listener = listener
        self._server = socket.create_server((ip, 0))
        self.address = "%s:%d" % (ip, self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._connections = {}  # (index, attempt) -> socket
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        who = None
        try:
            with connection.makefile("rb") as lines:
                hello = json.loads(lines.readline() or b"{}")
                if not hmac.compare_digest(str(hello.get("key", "")), self._key):
                    return
                who = (int(hello["index"]), int(hello["attempt"]))
                with self._lock:
                    self._connections[who] = connection
                for raw in lines:
                    self._listener(who[0], who[1], json.loads(raw))
        except (OSError, ValueError):
            pass
        finally:
            if who is not None:
                with self._lock:
                    self._connections.pop(who, None)
            connection.close()

    def stop_task(self, index, attempt):
        """Asks a connected task to stop its agent (False if it is not connected)."""
        with self._lock:
            connection = self._connections.get((index, attempt))
        if connection is None:
            return False
        try:
            connection.sendall(b'{"kind": "stop"}\n')
            return True
        except OSError:
            return False

    def close(self):
        self._server.close()
        with self._lock:
            for connection in self._connections.values():
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class TaskChannel:
    """A task's connection to the driver. `on_stop()` is called (on a thread of its own) when
    the driver asks the task to stop."""

    def __init__(self, address, key, index, attempt, on_stop=None):
        host, port = address.rsplit(":", 1)
        self._socket = socket.create_connection((host, int(port)), timeout=60)
        self._socket.settimeout(None)
        self._lock = threading.Lock()
        self.send({"key": key, "index": index, "attempt": attempt})
        if on_stop is not None:
            threading.Thread(target=self._read, args=(on_stop,), daemon=True).start()

    def _read(self, on_stop):
        try:
            with self._socket.makefile("rb") as lines:
                for raw in lines:
                    if json.loads(raw).get("kind") == "stop":
                        on_stop()
        except (OSError, ValueError):
            pass

    def send(self, message):
        data = (json.dumps(message) + "\n").encode()
        with self._lock:
            self._socket.sendall(data)

    def close(self):
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()


def encode(value, dumps):
    return base64.b64encode(dumps(value)).decode("ascii")


def decode(text):
    import pickle
    return pickle.loads(base64.b64decode(text))
