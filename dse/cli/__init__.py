"""The `dse` command: one module per subcommand in this package, each registering its parser here;
library code never lives in a CLI module.

Bad input anywhere (unknown names, malformed files, impossible requests) is a `ConfigError`:
one line on stderr naming the field and the fix, exit status 2, no traceback. Other expected
failures (an OS error on a path, an unreadable Parquet file, a bad value) are one line and exit 2
as well; anything unexpected is one line and exit 1, with the traceback only under `dse --debug`.
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from dse.errors import ConfigError

DESCRIPTION = ("dse: what it takes, in time, memory and money, to train or serve a large language model on a "
               "catalog or technology-derived system, and which systems, parallel mappings and serving "
               "configurations are Pareto-optimal (README.md).")
# Modules exposing `register(subparsers)`; each adds its parser with `set_defaults(func=...)`.
COMMAND_MODULES = (
    "dse.cli.validate",
    "dse.cli.calibrate",
    "dse.cli.bench",
    "dse.cli.listing",
    "dse.cli.roofline",
    "dse.cli.train",
    "dse.cli.infer",
    "dse.cli.serve",
    "dse.cli.sweep",
    "dse.cli.pareto",
    "dse.cli.top",
    "dse.cli.show",
    "dse.cli.report",
    "dse.cli.study",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default also prints the usage)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dse", description=DESCRIPTION)
    from dse import __version__
    parser.add_argument("--version", action="version", version=f"dse {__version__}",
                        help="print the dse version and exit")
    parser.add_argument("--debug", action="store_true",
                        help="print the full traceback of an unexpected error (default: one line)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND",
                                help="the command to run (`dse COMMAND --help` for its options)")
    for name in COMMAND_MODULES:
        import_module(name).register(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    """An exception as one line: an OS error names its path, others their type when not a ValueError."""
    if isinstance(exc, OSError) and exc.strerror:
        paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
        reason = exc.strerror
        if isinstance(exc, FileExistsError) and exc.filename is not None:
            from pathlib import Path
            if not Path(exc.filename).is_dir():  # mkdir where a file is: say what is wrong
                reason = "is a file, not a directory"
        text = f"{paths}: {reason}" if paths else reason
    else:
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, ValueError) or type(exc).__module__.startswith("pyarrow"):
            text = f"{type(exc).__name__}: {text}"
    return " ".join(text.split())


def _expected() -> tuple:
    """Exception types that are the user's input or environment, not a bug: exit 2."""
    kinds = [ConfigError, OSError, ValueError]
    try:
        import pyarrow as pa
        kinds.append(pa.ArrowException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # a command that reruns itself (calibrate)
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(f"dse: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dse top ... | head`: the reader left; not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("dse: interrupted; results written so far are kept", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, never a traceback
        if args.debug:
            import traceback
            traceback.print_exc()
        if isinstance(exc, _expected()):
            print(f"dse: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        hint = "" if args.debug else " (rerun as `dse --debug ...` for the traceback)"
        print(f"dse: internal error: {_one_line(exc)}{hint}", file=sys.stderr)
        return 1
    return int(code or 0)
