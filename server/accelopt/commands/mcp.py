"""`accelopt mcp [--http [--port P]]`: the MCP server for coding agents (stdio by default).

Configured like `accelopt optimize` (`--config FILE` with [search], [llm], agents, backend,
memory; the flags below win over the file), so an agent's searches use the same sandbox, budgets,
memory and backends as the command line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP on 127.0.0.1 instead of stdio (at http://127.0.0.1:PORT/mcp)",
    )
    parser.add_argument(
        "--port", type=int, default=8765, help="HTTP port on the loopback interface (default 8765)"
    )
    parser.add_argument("--config", metavar="FILE", help="TOML or JSON, as for `accelopt optimize`")
    parser.add_argument(
        "--agents", choices=["auto", "llm", "offline"], help="default: the config file's, else auto"
    )
    parser.add_argument(
        "--backend", choices=["simulator", "neuron"], help="profiling backend (default simulator)"
    )
    parser.add_argument("--hardware", choices=["trn1", "trn2", "trn3"], help="default target (default trn1)")
    parser.add_argument(
        "--size", choices=["full", "small"], default="full", help="default input shapes of reference modules"
    )
    parser.add_argument("--memory", metavar="FILE", help="optimization memory database (default: per user)")
    parser.add_argument("--no-memory", action="store_true", help="searches neither read nor write the memory")
    parser.add_argument(
        "--workers", type=int, metavar="W", help="concurrent evaluations per search (default 2)"
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="searches evaluate as Ray tasks: on a private local cluster, or on the cluster at ADDRESS",
    )
    parser.add_argument(
        "--llm-base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint for --agents llm (wins over [llm] base_url)",
    )
    parser.add_argument("--llm-model", metavar="MODEL", help="model every agent role uses")
    parser.add_argument(
        "--llm-api-key-env", metavar="NAME", help="environment variable holding the endpoint's API key"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="server log level (written to stderr; on stdio, stdout carries the protocol)",
    )


def settings_from(args: argparse.Namespace) -> Any:
    from accelopt.agents.run_config import load_run_config
    from accelopt.mcp.settings import McpSettings

    run_config = load_run_config(args.config)
    search = run_config.search.model_dump()
    for key, value in (("hardware", args.hardware), ("max_concurrent_evaluations", args.workers)):
        if value is not None:
            search[key] = value
    updates: dict[str, Any] = {"search": search}
    for key, value in (
        ("agents", args.agents),
        ("backend", args.backend),
        ("memory", args.memory),
        ("ray", args.ray),
    ):
        if value is not None:
            updates[key] = value
    llm = run_config.llm.model_dump() if run_config.llm is not None else {}
    for key, value in (
        ("base_url", args.llm_base_url),
        ("model", args.llm_model),
        ("api_key_env", args.llm_api_key_env),
    ):
        if value is not None:
            llm[key] = value
    if llm:
        updates["llm"] = llm
    run = type(run_config).model_validate({**run_config.model_dump(), **updates})
    return McpSettings(run=run, use_memory=not args.no_memory, size=args.size)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from accelopt.agents.run_config import ConfigError

    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        settings = settings_from(args)
    except (ConfigError, ValidationError) as exc:
        print(f"accelopt mcp: {exc}", file=sys.stderr)
        return 2
    from accelopt.mcp.server import build_server

    if args.http:
        # Loopback only: the server runs the kernels it is sent and has no authentication.
        build_server(settings).run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        from accelopt.mcp.stdio import run_stdio

        run_stdio(lambda closed: build_server(settings, closed))
    return 0
