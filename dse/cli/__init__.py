"""The `dse` command: one module per subcommand in this package, each registering its parser here;
library code never lives in a CLI module.

Bad input anywhere (unknown names, malformed files, impossible requests) is a `ConfigError`:
one line on stderr naming the field and the fix, exit status 2, no traceback.
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from dse.errors import ConfigError

# Modules exposing `register(subparsers)`; each adds its parser with `set_defaults(func=...)`.
COMMAND_MODULES = (
    "dse.cli.validate",
    "dse.cli.bench",
    "dse.cli.listing",
    "dse.cli.roofline",
    "dse.cli.train",
    "dse.cli.sweep",
    "dse.cli.report",
    "dse.cli.study",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default also prints the usage)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dse", description=__doc__.splitlines()[0])
    from dse import __version__
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dse top ... | head`: the reader left; not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("dse: interrupted; results written so far are kept", file=sys.stderr)
        return 130
    return int(code or 0)

