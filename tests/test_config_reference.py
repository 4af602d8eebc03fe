"""The README's config reference against the code that declares the keys (xegemm.config.sections): the block
shows every key there is and no other, it loads as a valid config, and every value it shows for a key with a
default is that default."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

import yaml

from xegemm.config import config_from_text
from xegemm.config.schema import Config
from xegemm.config.sections import SECTION_KEYS, SECTIONS, TOP_KEYS

README = Path(__file__).resolve().parent.parent / "README.md"


def reference_text() -> str:
    found = re.search(r"<!-- config reference: begin -->\n```yaml\n(.*?)```\n<!-- config reference: end -->",
                      README.read_text(), re.S)
    assert found, "README.md lacks the config reference markers"
    return found.group(1)


def defaults() -> dict:
    """Every key that has a default, by dotted name, with it."""
    top = {f.name: f.default for f in fields(Config) if f.name == "description"}
    return top | {f"{section}.{f.name}": f.default
                  for section, cls in SECTIONS.items() for f in fields(cls) if f.default is not MISSING}


def test_the_reference_shows_every_key_and_only_known_keys():
    shown = yaml.safe_load(reference_text())
    assert set(shown) == set(TOP_KEYS)
    for section, keys in SECTION_KEYS.items():
        assert set(shown[section]) == set(keys), section


def test_the_reference_is_a_valid_config_whose_values_are_the_defaults():
    values = config_from_text(reference_text(), "README.md").flat_values()
    for key, default in defaults().items():
        assert values[key] == default, f"README.md's config reference shows {key}: {values[key]!r}, the default is {default!r}"
