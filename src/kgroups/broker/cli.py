"""`kgroups serve`: run the broker in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import socket
import sys
from pathlib import Path

from kgroups.broker.config import (
    BrokerConfig,
    ConfigError,
    served_network_processes,
    usable_cores,
)
from kgroups.broker.descriptors import raise_soft_limit
from kgroups.broker.events import configure_logging
from kgroups.broker.gc_tuning import collect_for_serving
from kgroups.broker.malloc_tuning import fix_mmap_threshold
from kgroups.broker.security.listeners import parse_listeners
from kgroups.log.start_offsets import CheckpointError
from kgroups.storage.registry import DuplicateNodeIdError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve", help="run a Kafka-wire-compatible broker",
        description="Run a broker speaking the Kafka protocol: on its own with its data "
                    "directory, or with --storage one member of a cluster on PostgreSQL "
                    "(docs/cluster.md). Settings use Kafka's broker config names "
                    "(server.properties, --override key=value).",
    )
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=9092,
                        help="port to listen on; 0 picks a free one (default %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=Path("kgroups-data"),
                        help="directory of the logs, created if missing (default %(default)s)")
    parser.add_argument("--config", type=Path, help="a server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting, applied after --config (repeatable)")
    parser.add_argument("--storage", metavar="URL",
                        help="postgresql://USER@HOST:PORT/DB: join the cluster stored there "
                             "(kgroups.storage; give each broker its own node.id)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics over HTTP on this port, 0 for a free one "
                             "(kgroups.metrics.port; host kgroups.metrics.host, 127.0.0.1 by "
                             "default); off unless given")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="least severe event logged (default %(default)s)")
    parser.set_defaults(run=run_serve)


class StartupError(Exception):
    """The broker cannot start (or, in a cluster, go on) for a reason the operator must fix;
    the message says which."""


def _check_data_dir(data_dir: Path) -> None:
    """Fail before anything opens if the data directory cannot hold the logs."""
    if data_dir.exists() and not data_dir.is_dir():
        raise StartupError(f"data dir {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create data dir {data_dir}: {exc.strerror}") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise StartupError(f"data dir {data_dir} is not writable")


def _check_port(config: BrokerConfig) -> None:
    """Bind and release each listen address first, so a taken port is reported before the
    broker opens its logs (the broker's own bind still reports it if the port goes meanwhile)."""
    for listener in parse_listeners(config):
        if listener.port == 0:
            continue
        try:
            infos = socket.getaddrinfo(listener.host, listener.port, type=socket.SOCK_STREAM)
            family, kind, proto, _, address = infos[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as exc:
            raise _startup_failure(config, exc, (listener.host, listener.port)) from None


def _startup_failure(config: BrokerConfig, exc: OSError,
                     where: tuple[str, int] | None = None) -> StartupError:
    host, port = where or (config.host, config.port)
    if exc.errno == errno.EADDRINUSE:
        return StartupError(f"cannot listen on {host}:{port}: address already "
                            "in use (another broker?)")
    if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES):
        return StartupError(f"cannot listen on {host}:{port}: {exc.strerror}")
    path = f" ({exc.filename})" if exc.filename else ""
    return StartupError(f"cannot start: {exc.strerror or exc}{path}")


async def _serve(config: BrokerConfig) -> None:
    from kgroups.broker.broker import Broker

    try:
        broker = Broker(config)
    except OSError as exc:
        raise _startup_failure(config, exc) from None
    except ConfigError as exc:  # a listener's certificate or mechanisms (broker.security)
        raise StartupError(str(exc)) from None
    except CheckpointError as exc:  # the log start offsets DeleteRecords left
        raise StartupError(f"cannot start: {exc}") from None
    try:
        await broker.start()
    except OSError as exc:
        await broker.stop()
        raise _startup_failure(config, exc) from None
    except DuplicateNodeIdError as exc:
        await broker.stop()
        raise StartupError(f"cannot join the cluster: {exc}") from None
    collect_for_serving()  # the process is the broker's (gc_tuning)
    # The bound port on stdout lets a supervisor (or a test) use --port 0.
    print(f"listening {broker.host}:{broker.port}", flush=True)
    metrics = broker.coordinator.metrics_server
    if metrics is not None:  # likewise for --metrics-port 0
        print(f"metrics {metrics.host}:{metrics.port}", flush=True)
    for name, (host, port) in broker.listener_addresses.items():
        print(f"listener {name} {host}:{port}", flush=True)
    stop = broker.must_stop  # set by a signal, or by the cluster (node id taken over)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await broker.stop()
    if broker.stop_reason is not None:
        raise StartupError(f"stopped: {broker.stop_reason}")


def run_serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        config = BrokerConfig.build(host=args.host, port=args.port, data_dir=args.data_dir,
                                    config_file=args.config, overrides=[
                                        *args.override,
                                        *([f"kgroups.metrics.port={args.metrics_port}"]
                                          if args.metrics_port is not None else []),
                                        *([f"kgroups.storage={args.storage}"]
                                          if args.storage is not None else [])],
                                    defaults={"num.network.threads": str(
                                        served_network_processes(usable_cores()))})
        for warning in config.warnings():
            print(f"kgroups serve: warning: {warning}", file=sys.stderr)
        _check_data_dir(config.data_dir)
        _check_port(config)
    except (ConfigError, StartupError) as exc:
        print(f"kgroups serve: {exc}", file=sys.stderr)
        return 2
    # The process is the broker's alone: let the memory it frees leave it (see the module),
    # and take the open files its hard limit allows, as the JVM does for Kafka.
    fix_mmap_threshold()
    raise_soft_limit()
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    if not config.num_network_threads and any(
            listener.uses_tls for listener in parse_listeners(config)):
        # TLS listeners take each socket over before reading it (security.TlsAcceptor);
        # uvloop reads a new connection before the broker can pause it, asyncio does not.
        runner = asyncio.run
    try:
        with contextlib.suppress(KeyboardInterrupt):
            runner(_serve(config))
    except StartupError as exc:
        print(f"kgroups serve: {exc}", file=sys.stderr)
        return 2
    return 0
