"""A scripted LSP client over a server's stdin and stdout: what the protocol test and the latency benchmark
speak to accel-lsp with. Messages the server sends on its own (notifications, its requests) are kept in
order and can be waited for."""

import json
import os
import queue
import subprocess
import threading
import time


class ServerGone(Exception):
    pass


class Client:
    def __init__(self, command, cwd=None, stderr_path=None):
        self.stderr_file = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr_file, cwd=cwd
        )
        self.next_id = 0
        self.responses = {}
        self.incoming = queue.Queue()  # Everything that is not a response to our requests.
        self.lock = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    # ---- Wire. ----
    def send_raw(self, data: bytes):
        self.process.stdin.write(data)
        self.process.stdin.flush()

    @staticmethod
    def encode(message):
        body = json.dumps(message).encode("utf-8")
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    def send(self, message):
        self.send_raw(self.encode(message))

    def send_together(self, messages):
        """Several messages in one write: the server finds them in its input at once."""
        self.send_raw(b"".join(self.encode(m) for m in messages))

    def new_id(self):
        self.next_id += 1
        return self.next_id

    def _read(self):
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    with self.lock:
                        self.closed = True
                        self.lock.notify_all()
                    self.incoming.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = stream.read(length)
            message = json.loads(body.decode("utf-8"))
            if "id" in message and "method" not in message:
                with self.lock:
                    self.responses[message["id"]] = message
                    self.lock.notify_all()
            else:
                self.incoming.put(message)

    # ---- Requests and notifications. ----
    def request_async(self, method, params):
        request_id = self.new_id()
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def wait_response(self, request_id, timeout):
        deadline = time.monotonic() + timeout
        with self.lock:
            while request_id not in self.responses:
                if self.closed:
                    raise ServerGone("the server closed its output before answering request %s" % request_id)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no response to request %s in %s s" % (request_id, timeout))
                self.lock.wait(left)
            return self.responses.pop(request_id)

    def request(self, method, params, timeout=600):
        return self.wait_response(self.request_async(method, params), timeout)

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_message(self, predicate, timeout=600):
        """The next message from the server (notification or request) that `predicate` takes; the others
        before it are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching message from the server in %s s" % timeout)
            try:
                message = self.incoming.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                raise ServerGone("the server closed its output")
            if predicate(message):
                return message

    def wait_diagnostics(self, uri, version=None, timeout=600):
        return self.wait_message(
            lambda m: m.get("method") == "textDocument/publishDiagnostics"
            and m["params"]["uri"] == uri
            and (version is None or m["params"].get("version") == version),
            timeout,
        )["params"]["diagnostics"]

    # ---- A session. ----
    def initialize(self, root, capabilities=None, folders=None):
        caps = capabilities or {
            "workspace": {"workspaceEdit": {"documentChanges": True}, "applyEdit": True},
            "textDocument": {
                "codeAction": {
                    "disabledSupport": True,
                    "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix", "refactor"]}},
                }
            },
            "general": {"positionEncodings": ["utf-16"]},
        }
        params = {"processId": os.getpid(), "rootUri": uri_of(root), "capabilities": caps}
        if folders:
            params["workspaceFolders"] = [{"uri": uri_of(f), "name": os.path.basename(f)} for f in folders]
        result = self.request("initialize", params, timeout=60)
        self.notify("initialized", {})
        return result

    def open(self, path, text=None, version=1):
        if text is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri_of(path), "languageId": "cpp", "version": version, "text": text}},
        )
        return uri_of(path)

    def change(self, path, text, version):
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri_of(path), "version": version}, "contentChanges": [{"text": text}]},
        )

    def code_actions(self, path, line=0, timeout=600):
        return self.request(
            "textDocument/codeAction",
            {
                "textDocument": {"uri": uri_of(path)},
                "range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}},
                "context": {"diagnostics": []},
            },
            timeout,
        )

    def shutdown(self, timeout=30):
        response = self.request("shutdown", None, timeout)
        self.notify("exit", None)
        status = self.process.wait(timeout)
        return response, status

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def uri_of(path):
    from urllib.parse import quote

    return "file://" + quote(os.path.abspath(path))


def apply_text_edits(text, edits):
    """Applies LSP TextEdits (UTF-16 positions) to `text`, as an editor does."""
    lines = text.split("\n")

    def offset(position):
        # Byte offset in a Python str: count UTF-16 units on the line.
        line = position["line"]
        if line >= len(lines):
            return len(text)
        start = sum(len(l) + 1 for l in lines[:line])
        units = 0
        index = 0
        content = lines[line]
        while index < len(content) and units < position["character"]:
            units += 2 if ord(content[index]) > 0xFFFF else 1
            index += 1
        return start + index

    spans = [(offset(e["range"]["start"]), offset(e["range"]["end"]), e["newText"], i) for i, e in enumerate(edits)]
    # From the end, so earlier offsets stay right; inserts at one place keep their order.
    for begin, end, new_text, _ in sorted(spans, key=lambda s: (s[0], s[3]), reverse=True):
        text = text[:begin] + new_text + text[end:]
    return text
