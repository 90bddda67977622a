"""Command line: ``marekvs serve`` (one node), ``marekvs cluster ...``, ``marekvs certs``
(``launcher/certs.py``), ``marekvs repair`` and ``marekvs digest`` (anti-entropy:
``marekvs/antientropy/cli.py``).

Options of ``serve`` come, in increasing precedence, from the defaults, a TOML config
file (``--config``), ``MAREKVS_<OPTION>`` environment variables and the flags.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import fields

from marekvs import __version__
from marekvs import config as cfgmod


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="run one marekvs node",
        description="Run one marekvs node. Options also come from a TOML config file (--config) "
                    "and from MAREKVS_<OPTION> environment variables (e.g. MAREKVS_PORT=6380); "
                    "flags win over environment, environment over the file.")
    p.add_argument("--config", metavar="FILE", help="TOML config file with the options below as keys")
    defaults = cfgmod.Config()
    for f in fields(cfgmod.Config):
        flag = "--" + f.name.replace("_", "-")
        default = cfgmod.LOAD_DEFAULTS.get(f.name, getattr(defaults, f.name))
        kw = {"dest": f.name, "default": None, "help": f"{cfgmod.Config.HELP[f.name]} (default: {default!r})"}
        if f.name == "durability":
            kw["choices"] = ["always", "everysec", "no"]
        if f.name == "log_level":
            kw["choices"] = ["debug", "info", "warning", "error"]
        p.add_argument(flag, **kw)


def _add_worker(sub: argparse._SubParsersAction) -> None:
    """``marekvs worker``: one shard worker, started by the supervisor of a node with
    shards > 1 (marekvs/shards/supervisor.py); not for users (no help line)."""
    p = sub.add_parser("worker")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--mesh", required=True)
    p.add_argument("--ready-fd", type=int, default=-1)
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--config-json", required=True)
    p.add_argument("--config-file", default=None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marekvs", description="marekvs: active-active Redis-compatible store")
    parser.add_argument("--version", action="version", version=f"marekvs {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_serve(sub)
    _add_worker(sub)
    from marekvs.launcher import cli as launcher  # marekvs cluster ...: the local multi-node launcher

    launcher.add_parser(sub)
    launcher.add_certs_parser(sub)  # marekvs certs: a throwaway CA and certificates
    from marekvs.antientropy import cli as antientropy  # marekvs repair / digest

    antientropy.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        overrides = {f.name: getattr(args, f.name) for f in fields(cfgmod.Config)}
        try:
            config = cfgmod.load(args.config, overrides=overrides)
        except (ValueError, OSError) as e:
            print(f"marekvs: bad configuration: {e}", file=sys.stderr)
            return 2
        logging.basicConfig(level=config.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from marekvs.shards import supervisor

        try:  # the data directory laid out for this shard count (resharded if it was for another)
            dirs = supervisor.prepare(config)
        except supervisor.Refused as e:
            logging.critical("%s", e)
            return 1
        if config.shards > 1:  # a supervisor and its shard workers
            return supervisor.serve(config, args.config, dirs)
        from marekvs.process import serve

        serve(config, args.config)
        return 0
    if args.cmd == "worker":
        return _worker(args)
    return args.func(args)


def _worker(args: argparse.Namespace) -> int:
    import os

    from marekvs.shards.supervisor import watch_parent, worker_config

    if os.getppid() != args.parent:  # the supervisor died before PR_SET_PDEATHSIG was set
        return 1
    watch_parent(args.parent)
    config = worker_config(args.config_json)
    logging.basicConfig(level=config.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s %(name)s[worker {args.index}]: %(message)s")
    from marekvs.process import Worker, serve

    serve(config, args.config_file, Worker(args.index, args.mesh, args.ready_fd))
    return 0
