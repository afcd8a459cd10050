"""Reading a config: the YAML file, then every section validated in turn."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from common.config.errors import ConfigError
from common.config.model import Config
from common.config.proxy import parse_proxy
from common.config.readers import check_keys, get_str, mapping
from common.config.redis import parse_redis
from common.config.sections import (
    parse_endpoints,
    parse_networks,
    parse_probe,
    parse_sidecar,
)


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> Config:
    """Build a validated ``Config`` from a parsed YAML document (pure)."""
    env = os.environ if env is None else env
    top = mapping(raw, "(top level)")
    check_keys(top, ("proxy", "sidecar", "data_dir", "probe", "networks", "registry", "redis"), "")
    networks = parse_networks(top.get("networks"))
    data_dir = get_str(top, "data_dir", "./data", "data_dir")
    if not data_dir:
        raise ConfigError("data_dir", "must be a non-empty path")
    return Config(
        proxy=parse_proxy(top.get("proxy"), networks, env),
        sidecar=parse_sidecar(top.get("sidecar"), env),
        data_dir=Path(data_dir),
        probe=parse_probe(top.get("probe")),
        networks=networks,
        endpoints=parse_endpoints(top.get("registry"), networks, env),
        redis=parse_redis(top.get("redis"), env),
    )


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML config file; every failure is a ``ConfigError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("(file)", f"cannot read {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError("(file)", f"{str(path)!r} is not UTF-8 text (byte {e.start})") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader: no Python objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None)
        why = f": {problem}" if isinstance(problem, str) and problem else ""
        raise ConfigError("(file)", f"{path} is not valid YAML{where}{why}") from None
    except RecursionError:
        raise ConfigError("(file)", f"{path} is YAML nested deeper than any config is") from None
    try:
        return parse_config(raw, env)
    except RecursionError:
        raise ConfigError("(file)", f"{path} is YAML nested deeper than any config is") from None


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error:
    the plain loader keeps the last one, so a second ``proxy:`` section
    silently replaced the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: the safe loader's own error says so
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
