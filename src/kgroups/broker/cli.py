"""`kgroups serve`: run the broker in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from kgroups.broker.config import BrokerConfig, ConfigError
from kgroups.broker.events import configure_logging
from kgroups.broker.malloc_tuning import fix_mmap_threshold


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve", help="run a Kafka-wire-compatible broker",
        description="Run a single-node broker speaking the Kafka protocol. Settings use Kafka's "
                    "broker config names (server.properties, --override key=value).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9092, help="0 picks a free port")
    parser.add_argument("--data-dir", type=Path, default=Path("kgroups-data"))
    parser.add_argument("--config", type=Path, help="a server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting, applied after --config (repeatable)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(handler=run_serve)


async def _serve(config: BrokerConfig) -> None:
    from kgroups.broker.broker import Broker

    broker = Broker(config)
    await broker.start()
    # The bound port on stdout lets a supervisor (or a test) use --port 0.
    print(f"listening {broker.host}:{broker.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await broker.stop()


def run_serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        config = BrokerConfig.build(host=args.host, port=args.port, data_dir=args.data_dir,
                                    config_file=args.config, overrides=args.override)
    except ConfigError as exc:
        print(f"kgroups serve: {exc}", file=sys.stderr)
        return 2
    # The process is the broker's alone: let the memory it frees leave it (see the module).
    fix_mmap_threshold()
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve(config))
    return 0
