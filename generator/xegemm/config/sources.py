"""What ``xegemm.load``, ``xegemm export`` and the like take as a source: a config file, a directory ``xegemm tune``
wrote (its ``best.yaml`` and the measurements of ``best.json``) or a :class:`~xegemm.config.Config` itself.
Reading a source imports nothing from the tuner: it is a config and a JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from xegemm.config import Config, load_config
from xegemm.errors import XegemmError
from xegemm.files import RESULTS_BYTES, read_text

BEST_CONFIG, BEST_JSON = "best.yaml", "best.json"


def read_best(directory: Path) -> dict:
    """best.json of a tune directory ({} if it has none), read bounded."""
    path = directory / BEST_JSON
    if not path.is_file():
        return {}
    try:
        data = json.loads(read_text(path, RESULTS_BYTES, "best.json of xegemm tune"))
    except ValueError as exc:
        raise XegemmError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise XegemmError(f"{path} is not a best.json of xegemm tune (not a JSON object)")
    return data


def load_source(source) -> tuple[Config, dict, str]:
    """(config, best.json data or {}, a label) of a config file, a tune output directory or a Config."""
    if isinstance(source, Config):
        return source, {}, source.name
    path = Path(source)
    if path.is_dir():
        if not (path / BEST_CONFIG).is_file():
            raise XegemmError(f"{path} holds no {BEST_CONFIG}: pass a config file or a directory `xegemm tune` "
                              "wrote (best.yaml, best.json)")
        return load_config(path / BEST_CONFIG), read_best(path), str(path)
    if not path.is_file():
        raise XegemmError(f"no such config file or tune directory: {path}")
    return load_config(path), read_best(path.parent) if path.name == BEST_CONFIG else {}, str(path)
