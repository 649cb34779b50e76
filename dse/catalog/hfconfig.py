"""Hugging Face `config.json` -> dse model columns: a model as users have it.

`model` may name a catalog entry or give a Hugging Face config: a path to a `config.json`, a
directory holding one, the JSON text, or a dict of its fields. `model_columns(value)` maps it to
the numbers of the model columns (dse/catalog/columns.csv); dse.resolve fills them like a catalog
row. Nothing is downloaded: the config is read from disk or given in memory.

Families (by `model_type`, else by `architectures[0]`; the per-family mappers are in
dse.catalog.hffamilies): Llama, Mistral, Qwen2, Qwen3 (dense); Mixtral; Qwen2-MoE, Qwen3-MoE;
DeepSeek-V2/V3 and Kimi K2 / K2.5 (MLA); DeepSeek-V3.2 and GLM-5 (MLA with DeepSeek Sparse Attention);
GPT-OSS; Llama 4; Gemma 3; Nemotron-H and Nemotron 3 (`hybrid_override_pattern` or `layers_block_type`); Qwen3-Next and
Qwen3.5; Qwen3-VL (the text model of the vision-language config); MiniMax-M2. A per-layer pattern (`layer_types`,
`hybrid_override_pattern`, `no_rope_layers`, `mlp_only_layers`, a MoE step) is reduced to the
share of the layers of each type; which layer has which type does not change time or memory to
first order (dse.workload says what is assumed for pipeline stages).

An unknown family or a field the mapping cannot represent (missing, not a number, a layer type it
does not know, a pattern that does not match the layer count, ...) is one `ConfigError` line
naming the field. Fields that do not change time or memory (RoPE scaling, norms' epsilon, token
ids, quantization of the released checkpoint, multi-token-prediction heads) are ignored.

The training sequence length is not in a config: `seq_len` defaults to the pre-training context
the config states (`rope_scaling.original_max_position_embeddings`, `initial_context_length`), else
to max_position_embeddings capped at 8192; give `seq_len` to change it.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache

from dse.errors import ConfigError

REQUIRED = object()
CONFIG_FILE = "config.json"
DEFAULT_TRAINING_CONTEXT_CAP = 8192


def is_config(value) -> bool:
    """True when a `model` value gives a Hugging Face config rather than a catalog name."""
    if isinstance(value, dict):
        return True
    if not isinstance(value, str):
        return False
    text = value.strip()
    return (text.startswith("{") or text.lower().endswith(".json") or "/" in text or os.sep in text
            or os.path.isdir(text))


class Fields:
    """A config's fields, read with the path an error names (`text_config.hidden_size`)."""

    def __init__(self, fields: dict, where: str, prefix: str = ""):
        self.fields, self.where, self.prefix = fields, where, prefix

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.prefix}{key}: {problem} (Hugging Face config {self.where})")

    def get(self, key: str, default=None):
        value = self.fields.get(key)
        return default if value is None else value

    def has(self, key: str) -> bool:
        return self.fields.get(key) is not None

    def num(self, key: str, default=REQUIRED, *, integer: bool = True, minimum: float = 1):
        """A number field: ConfigError naming it when it is missing (and required), not a number,
        not an integer where one is needed, or below `minimum`."""
        value = self.fields.get(key)
        if value is None:
            if default is REQUIRED:
                raise self.error(key, "missing; this model family needs it")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"{value!r} is not a number")
        if integer and value != int(value):
            raise self.error(key, f"{value!r} is not an integer")
        if not value >= minimum:
            raise self.error(key, f"{value!r} is below {minimum:g}")
        return float(value)

    def flag(self, key: str, default: bool) -> float:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"{value!r} is not true or false")
        return float(value)

    def strings(self, key: str, length: int) -> list:
        """A per-layer list of strings (layer_types) of the model's layer count."""
        value = self.fields.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"{value!r} is not a list of layer types")
        if len(value) != length:
            raise self.error(key, f"lists {len(value)} layers, num_hidden_layers is {length:g}")
        return value

    def sub(self, key: str) -> "Fields":
        value = self.fields.get(key)
        if not isinstance(value, dict):
            raise self.error(key, "missing or not a mapping of the text model's fields")
        return Fields(value, self.where, f"{self.prefix}{key}.")


def load(value) -> tuple[dict, str]:
    """(the config's fields, where they came from) for a path, a directory, JSON text or a dict."""
    if isinstance(value, dict):
        return value, "given as a dict"
    text = value.strip()
    if text.startswith("{"):
        return _parse(text, "given as JSON text"), "given as JSON text"
    path = os.path.join(text, CONFIG_FILE) if os.path.isdir(text) else text
    try:
        with open(path, encoding="utf-8") as fh:
            return _parse(fh.read(), path), path
    except OSError as exc:
        raise ConfigError(f"model: cannot read the Hugging Face config {path} ({exc.strerror}); give a catalog "
                          "name (dse list models), a config.json or a directory holding one") from None


def _parse(text: str, where: str) -> dict:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model: {where} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(fields, dict):
        raise ConfigError(f"model: {where} is not a JSON object of config fields")
    return fields


def model_columns(value) -> dict:
    """The model columns (name -> number) of a Hugging Face config given as `model`."""
    if isinstance(value, dict):
        return dict(_columns_of_text(json.dumps(value, sort_keys=True, default=str), "given as a dict"))
    text = value.strip()
    if text.startswith("{"):
        return dict(_columns_of_text(text, "given as JSON text"))
    fields, where = load(text)
    return dict(_columns_of_file(os.path.abspath(where), os.stat(where).st_mtime_ns))


@lru_cache(maxsize=256)
def _columns_of_file(path: str, mtime_ns: int) -> tuple:
    fields, where = load(path)
    return tuple(map_config(fields, where).items())


@lru_cache(maxsize=256)
def _columns_of_text(text: str, where: str) -> tuple:
    return tuple(map_config(_parse(text, where), where).items())


def family_of(fields: dict, where: str) -> str:
    """The mapper's family name from `model_type`, else from `architectures[0]` (which also names
    the family where an engine's copy of a config relabels `model_type`: SGLang's DeepSeek-V4 FP8
    checkpoints say 'deepseek_ref' beside DeepseekV4ForCausalLM)."""
    from dse.catalog import hffamilies as H
    model_type = fields.get("model_type")
    if isinstance(model_type, str) and model_type in H.FAMILIES:
        return model_type
    architectures = fields.get("architectures")
    if isinstance(architectures, list) and architectures:
        family = H.ARCHITECTURES.get(str(architectures[0]))
        if family is not None:
            return family
        if model_type is None:
            raise ConfigError(f"architectures: unknown Hugging Face architecture {architectures[0]!r} "
                              f"(Hugging Face config {where}); known: {', '.join(sorted(H.ARCHITECTURES))}")
    raise ConfigError(f"model_type: unknown Hugging Face model family {model_type!r} (Hugging Face config "
                      f"{where}); known: {', '.join(sorted(H.FAMILIES))}")


def map_config(fields: dict, where: str = "given as a dict") -> dict:
    """Model columns of a parsed config (every column the family sets; the rest take their schema
    defaults when the model resolves)."""
    from dse.catalog import hffamilies as H
    fields = {k: v for k, v in fields.items() if k != "_source"}
    family = family_of(fields, where)
    columns = H.FAMILIES[family](Fields(fields, where))
    return {k: float(v) for k, v in columns.items()}


def training_context(f: Fields) -> float:
    """The pre-training context a config states, else max_position_embeddings capped at 8192."""
    scaling = f.get("rope_scaling")
    if isinstance(scaling, dict) and isinstance(scaling.get("original_max_position_embeddings"), (int, float)):
        return float(scaling["original_max_position_embeddings"])
    if f.has("initial_context_length"):
        return f.num("initial_context_length")
    return min(f.num("max_position_embeddings", DEFAULT_TRAINING_CONTEXT_CAP), DEFAULT_TRAINING_CONTEXT_CAP)
