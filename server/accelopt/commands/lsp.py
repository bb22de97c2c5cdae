"""`accelopt lsp [--stdio | --tcp --port P]`: start the language server (stdio by default)."""

from __future__ import annotations

import argparse
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    transport.add_argument("--tcp", action="store_true", help="listen for one client on a TCP port")
    parser.add_argument("--host", default="127.0.0.1", help="TCP address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="server log level (written to stderr; stdout carries the protocol)",
    )


def run(args: argparse.Namespace) -> int:
    from accelopt.lsp.server import create_server
    from accelopt.lsp.signals import end_at_once_on_signals

    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # pygls logs every message body at INFO, which would put whole documents in the log.
    logging.getLogger("pygls").setLevel(max(logging.WARNING, logging.getLogger().level))
    end_at_once_on_signals()  # the serving loop takes SIGTERM/SIGHUP over at `initialize`
    server = create_server()
    if args.tcp:
        server.start_tcp(args.host, args.port)
    else:
        server.start_io()
    # pygls swallows the SystemExit its `exit` handler raises: the code LSP asks for is ours to return
    return server.exit_code
