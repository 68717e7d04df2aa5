"""Checks that every field of a config dataclass carries a one-line meaning in its source."""

import dataclasses
import inspect
import typing


def assert_fields_documented(cls):
    """Each field, in the class of ``cls``'s hierarchy that declares it, has a ``#`` comment."""
    hints = typing.get_type_hints(cls)
    for owner in cls.__mro__:
        if not dataclasses.is_dataclass(owner) or "__annotations__" not in vars(owner):
            continue
        lines = inspect.getsource(owner).splitlines()
        names = list(vars(owner)["__annotations__"])
        starts = [
            next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:"))
            for name in names
        ]
        for name, first, last in zip(names, starts, starts[1:] + [len(lines)]):
            if typing.get_origin(hints[name]) is typing.ClassVar:
                continue  # not a field
            if dataclasses.is_dataclass(hints[name]) or name == "phases":
                continue  # a section, documented by its own class docstring
            assert any("#" in line for line in lines[first:last]), f"{owner.__name__}.{name}"
