"""A framework named with its release ('NeMo 25.04', 'TensorRT-LLM 0.19', 'vLLM 0.10.1',
'nemo:26.06', 'TensorRT-LLM 1.2.0rc6'): the preset of that framework whose releases it falls in.

A preset's `version` column (frameworks.csv) states the releases it describes ('24.07',
'25.11/26.02', '>=0.8', '<=0.6.1', 'r0.8', '2019-2022'); its first version is where it starts. A
framework's presets are the ones whose names or aliases, without their release, spell the same
framework ('nemo 24.07' and 'nemo 25.11' are both NeMo). A release picks the preset that started
last at or before it, or the oldest one for a release older than them all: NeMo 25.04 runs as the
24.07 preset, NeMo 26.06 as the 25.11/26.02 one, TensorRT-LLM 0.19 as the >=0.8 one."""
from __future__ import annotations

import re

# a release at the end of a name: 'v0.5', '25.04', ':26.02', '1.2.0rc6', '0.10.1.post1'
RELEASE = re.compile(r"[\s_:/-]*v?(\d+(?:\.\d+)*)(?:\.?(?:rc|post|dev)\d*)*$", re.IGNORECASE)
VERSION = re.compile(r"\d+(?:\.\d+)*")


def release(text: str) -> tuple[str, tuple | None]:
    """(name without its release, the release as a tuple of numbers or None)."""
    found = RELEASE.search(text.strip())
    if not found or found.start() == 0:
        return text.strip(), None
    return text[: found.start()].strip(), tuple(int(p) for p in found.group(1).split("."))


def start(version) -> tuple:
    """The first release a preset's `version` names (its lower bound); () for none or '<=x'."""
    text = "" if version is None or version != version else str(version)
    found = VERSION.search(text)
    if not found or text.lstrip().startswith("<"):
        return ()
    return tuple(int(p) for p in found.group(0).split("."))


def by_release(table, key, value: str) -> str | None:
    """The preset (a `name` of `table`) for framework `value` with a release, or None when `value`
    names no release or no framework. `key` spells a name for comparison (separators dropped)."""
    base, wanted = release(value)
    if wanted is None:
        return None
    family = []
    for name, more, version in zip(table["name"], table["aliases"].fillna(""), table["version"]):
        spellings = [name, *[a for a in str(more).split(";") if a.strip()]]
        if any(key(release(s)[0]) == key(base) for s in spellings):
            family.append((start(version), str(name)))
    if not family:
        return None
    started = [f for f in family if f[0] <= wanted]
    return max(started)[1] if started else min(family)[1]
