"""Reading space (and study) files: `read_yaml` and `load_space`."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dse.errors import ConfigError
from dse.space.enumerate import Space, canonical
from dse.space.spec import parse_spec


MAX_FILE_BYTES = 1 << 20  # a space or study file is a page of text, never megabytes


def read_yaml(path: Path, kind: str):
    """The parsed content of a YAML space or study file; a syntax error is a ConfigError with
    its line and column."""
    import yaml
    try:
        text = Path(path).read_text()
        if len(text) > MAX_FILE_BYTES:
            raise ConfigError(f"{path}: {len(text):,} bytes is too large for a {kind} file (limit {MAX_FILE_BYTES:,})")
        for event in yaml.parse(text, Loader=yaml.SafeLoader):  # before anything is built
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                raise ConfigError(f"{path}: line {mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in a "
                                  f"{kind} file (they can expand without bound); write the values out")
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}; fix the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; give a YAML {kind} file") from None


def load_space(path_or_mapping, name: str | None = None) -> Space:
    """Load and validate a space from a YAML file path or a mapping. ConfigError on bad input."""
    if isinstance(path_or_mapping, Space):
        return path_or_mapping
    if isinstance(path_or_mapping, Mapping):
        return Space.from_dict(path_or_mapping, name)
    path = Path(path_or_mapping)
    src = str(path_or_mapping)
    if not path.is_file():
        raise ConfigError(f"{src}: no such space file; give the path of a YAML file (see spaces/)")
    raw = read_yaml(path, "space")
    if raw is None:
        raise ConfigError(f"{src}: the file is empty, so the space is empty; give fixed columns and axes")
    spec = parse_spec(raw, src, name)
    return Space(spec, canonical(raw), src)
