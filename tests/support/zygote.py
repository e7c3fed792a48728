"""A pre-imported launcher for tests that start many short-lived `compactor` servers.

`python -m compactor` spends ~1.3 s of CPU importing the MCP SDK and loading token ranks before
it reads a byte; a test that kills and restarts the server 100 times cannot pay that each time.
The zygote pays it once, then forks one child per request. Each child is a separate process
that runs the real `compactor.cli.main(argv)` with its stdin and stdout on a socket the test
holds, so a SIGKILL hits a real server mid-call exactly as it would the installed command.

Protocol on the control socket (fd given as argv[1]): the test sends the server's argv as JSON
with the server end of a socketpair attached (SCM_RIGHTS); the zygote answers with the child's
pid as JSON. Children are reaped automatically (SIGCHLD ignored).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def _child(conn: int, argv: list[str]) -> None:
    os.dup2(conn, 0)
    os.dup2(conn, 1)
    os.close(conn)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    from compactor.cli import main

    code = 1
    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        os._exit(code)


def serve(ctrl: socket.socket) -> None:
    import compactor.cli
    import compactor.mcp
    import compactor.store
    from compactor.content.tokens import default_counter

    default_counter().count("warm up the token ranks before forking")
    del compactor
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        msg, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 1)
        if not msg:
            return
        argv = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            ctrl.close()
            _child(fds[0], argv)
        os.close(fds[0])
        ctrl.sendall(json.dumps(pid).encode())


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
