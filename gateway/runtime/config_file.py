"""Reading a config file from disk: at most ``MAX_CONFIG_BYTES`` of UTF-8 YAML, at most
``MAX_CONFIG_VALUES`` values once its aliases are expanded (a billion-laughs file is measured without
being built), each refusal one ``ConfigError`` line naming the file. What the values may be is
``gateway.runtime.config``'s (``parse_config``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.runtime.config import ConfigError, GatewayConfig, parse_config

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config file is kilobytes; more is a mistake or an attack
MAX_CONFIG_VALUES = 100_000  # values in the file once YAML's aliases are expanded


def _values(node: yaml.Node, seen: dict[int, int]) -> int:
    """How many values ``node`` stands for with every alias expanded, counted on the node graph (an
    alias is the same node again), so a billion-laughs file is measured without being built."""
    if id(node) in seen:
        return seen[id(node)]
    seen[id(node)] = MAX_CONFIG_VALUES + 1  # an alias of an enclosing node: a cycle is too many values
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    total = 1
    for child in children:
        total += _values(child, seen)
        if total > MAX_CONFIG_VALUES:
            break
    seen[id(node)] = total
    return total


def read_yaml(p: Path) -> Any:
    """The file's YAML: UTF-8, at most ``MAX_CONFIG_BYTES``, at most ``MAX_CONFIG_VALUES`` values with
    aliases expanded; each refusal is one ``ConfigError`` line saying why."""
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: the file is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: byte {exc.start}: the file is not UTF-8 text") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _values(node, {}) > MAX_CONFIG_VALUES:
            raise ConfigError(f"{p}: more than {MAX_CONFIG_VALUES} values once aliases are expanded")
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{p}: {where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply") from None
    finally:
        loader.dispose()


def load_config(path: str | Path) -> GatewayConfig:
    p = Path(path)
    return parse_config(read_yaml(p), str(p))
