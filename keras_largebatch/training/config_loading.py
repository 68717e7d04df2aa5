"""Reading run configs: a YAML file, plain data and ``key=value`` overrides into a config
dataclass (`keras_largebatch.training.config`).

A YAML file sets any subset of the fields with the same nesting, and overrides change single
fields with dotted keys, the value read as YAML: ``log_interval=10``, ``phases.0.steps=100``,
``strategy.devices=['/cpu:0', '/cpu:1']``. An unknown key is a `ValueError`, a value of the
wrong type a `TypeError`, each naming the key and the value, raised before any work. Numbers
written as ``6e-3`` (which YAML 1.1 reads as a string) are accepted for numeric fields. A
config class may list fields it no longer has in a ``REMOVED_FIELDS`` ClassVar (field name ->
what to do instead); setting one is refused with that note.
"""

import dataclasses
import math
import re
import types
import typing

import yaml

from keras_largebatch import _checks

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def config_from_dict(cls, values, key="config"):
    """Builds a ``cls`` config from nested plain data (a loaded YAML document); not validated."""
    return _build(cls, values if values is not None else {}, key)


def load_config(cls, path=None, overrides=()):
    """Loads a ``cls`` config: defaults, then the YAML file at ``path`` (if any), then overrides.

    Args:
        cls: the config dataclass, derived from `RunConfig`.
        path: a YAML file with any subset of the fields, or None for the defaults.
        overrides: ``"key=value"`` strings; dotted keys reach nested fields and list items
            (``phases.1.steps=1563``); values are parsed as YAML.

    Returns:
        The validated config.

    Raises:
        ValueError: an unknown key, a value out of range, a malformed override, or a file that
            is not a YAML mapping. TypeError: a value of the wrong type. The message names the
            key and the value.
    """
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as stream:
            values = yaml.safe_load(stream)
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ValueError(f"config file {path!r} must hold a YAML mapping, got {values!r}")
    config = config_from_dict(cls, values)
    for override in overrides:
        config = apply_override(config, override)
    return config.validate()


def apply_override(config, override):
    """Returns a new config of the same class with one ``"key=value"`` override applied (not
    validated)."""
    if not isinstance(override, str) or "=" not in override:
        raise ValueError(
            f"an override must look like key=value (e.g. phases.0.steps=100), got {override!r}"
        )
    key, text = override.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise ValueError(f"override {override!r}: the value is not valid YAML ({error})") from None
    values = config.to_dict()
    parts = key.split(".")
    _refuse_removed(type(config), parts, key)
    target = values
    for depth, part in enumerate(parts[:-1]):
        target = _child(target, part, ".".join(parts[: depth + 1]), key)
    _set_child(target, parts[-1], value, key)
    return config_from_dict(type(config), values)


def _refuse_removed(cls, parts, key):
    """Raises ValueError, saying why and what to do, when ``parts`` (a dotted key split) reach
    a field that the config class at their end lists in its ``REMOVED_FIELDS`` (field name ->
    note) ClassVar."""
    for part in parts[:-1]:
        if part.isdigit() or not dataclasses.is_dataclass(cls):
            inner = typing.get_args(cls)
            cls = inner[0] if inner else cls
            continue
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return
        cls = hints[part]
        inner = [arg for arg in typing.get_args(cls) if dataclasses.is_dataclass(arg)]
        cls = inner[0] if inner else cls
    note = getattr(cls, "REMOVED_FIELDS", {}).get(parts[-1])
    if note is not None:
        raise ValueError(f"config key {key!r} was removed: {note}; delete it")


def _child(container, part, path, key):
    if isinstance(container, list):
        return container[_list_index(container, part, path, key)]
    if not isinstance(container, dict) or part not in container:
        valid = sorted(container) if isinstance(container, dict) else []
        raise ValueError(
            f"unknown config key {path!r} in override {key!r}; valid keys here: {valid}"
        )
    if container[part] is None:
        raise ValueError(
            f"config key {path!r} is null; set it whole (e.g. {path}=[...]) rather "
            f"than an item of it"
        )
    return container[part]


def _set_child(container, part, value, key):
    if isinstance(container, list):
        container[_list_index(container, part, key, key)] = value
        return
    if part not in container:
        raise ValueError(f"unknown config key {key!r}; valid keys here: {sorted(container)}")
    container[part] = value


def _list_index(container, part, path, key):
    if not part.isdigit() or int(part) >= len(container):
        raise ValueError(
            f"config key {path!r} in override {key!r}: {part!r} must be a list index in "
            f"[0, {len(container)})"
        )
    return int(part)


def _build(cls, values, key):
    if isinstance(values, cls):
        return values
    if not isinstance(values, dict):
        raise TypeError(f"{key} must be a mapping of {cls.__name__} fields, got {values!r}")
    fields = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        prefix = "" if key == "config" else f"{key}."
        _refuse_removed(cls, [unknown[0]], f"{prefix}{unknown[0]}")
        raise ValueError(f"unknown config key {prefix}{unknown[0]!s}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        field_key = name if key == "config" else f"{key}.{name}"
        kwargs[name] = _coerce(hints[name], value, field_key)
    return cls(**kwargs)


def _coerce(annotation, value, key):
    """Checks ``value`` against a field's type; converts YAML's string numbers ("6e-3")."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return _coerce(inner, value, key)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            example = value if isinstance(value, (str, int, float)) else "..."
            raise TypeError(
                f"{key} must be a list, got {value!r}; in YAML or an override it is written in "
                f"brackets, quoted for the shell: '{key}=[{example}]'"
            )
        return [_coerce(item_type, item, f"{key}.{index}") for index, item in enumerate(value)]
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, key)
    if annotation is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{key} must be true or false, got {value!r}")
        return value
    if annotation is str:
        return _checks.check_string(key, value)
    if annotation in (int, float):
        number = value
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            number = float(value)
        if annotation is int:
            if _checks.is_number(number) and math.isfinite(number) and number == int(number):
                return int(number)
            raise TypeError(f"{key} must be an integer, got {value!r}")
        return float(_checks.check_number(key, number))
    raise TypeError(f"unsupported config field type {annotation!r} for {key}")
