"""An editor that dies while something else still holds the server's stdin: the server notices
from the process id the editor gave in `initialize`, and exits."""

from __future__ import annotations

import json
import subprocess
import time

from lsp_editor import server_command

from accelopt.lsp.client_watch import process_alive


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def _read_response(stdout) -> dict:
    length = 0
    while (line := stdout.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stdout.read(length))


def test_the_server_exits_when_its_editor_has_gone_and_stdin_is_still_open(tmp_path):
    editor = subprocess.Popen(["sleep", "600"])
    server = subprocess.Popen(server_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    try:
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"processId": editor.pid, "rootUri": tmp_path.as_uri(), "capabilities": {}},
        }
        server.stdin.write(_frame(initialize))
        server.stdin.flush()
        assert _read_response(server.stdout)["id"] == 1
        time.sleep(3)
        assert server.poll() is None, "the server must run while its editor does"

        editor.kill()  # and not reaped: a zombie is gone too
        deadline = time.monotonic() + 10
        while process_alive(editor.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(editor.pid)  # dead, not yet reaped (poll() would reap it)
        returncode = server.wait(timeout=30)  # stdin is still open: only the process id tells
        assert returncode == 0
        assert b"has gone without closing the connection" in server.stderr.read()  # type: ignore[union-attr]
    finally:
        for process in (server, editor):
            if process.poll() is None:
                process.kill()
            process.wait()
