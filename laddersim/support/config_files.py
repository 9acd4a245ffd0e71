"""Reading a YAML config file into a validated pydantic model, with one-line errors.

Profiles, sweep grids and price files all go through here, so a typo anywhere is reported the
same way: the file, the dotted field path, and what is wrong (unknown fields before the missing
ones they cause, with the closest known name).
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from laddersim.errors import UserInputError
from laddersim.support.io_read import first_line, read_yaml

Model = TypeVar("Model", bound=BaseModel)


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """Field names of the (nested) model at ``loc`` inside ``model``; [] when it cannot be told."""
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue  # a list item: same model
        field = model.model_fields.get(str(part))
        model = None
        if field is not None:
            for candidate in (field.annotation, *getattr(field.annotation, "__args__", ())):
                inner = getattr(candidate, "__args__", None)
                for kind in (candidate, *(inner or ())):
                    if isinstance(kind, type) and issubclass(kind, BaseModel):
                        model = kind
    return [name for name, f in model.model_fields.items() if not f.exclude] if model is not None else []


def format_validation_error(exc: ValidationError, where: str, model: type[BaseModel] | None = None) -> str:
    """One line naming the bad field (dotted path) and what is wrong with it.

    An unknown field (usually a typo) is reported before the missing field it causes, with the
    closest known name as a suggestion and, when ``model`` is given, the allowed names.
    """
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"]) or "file"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        missing = [e["loc"][-1] for e in errors if e["type"] == "missing" and e["loc"][:-1] == err["loc"][:-1]]
        fields = _fields_at(model, err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), fields or [str(m) for m in missing], n=1)
        msg = "unknown field" + (f" (did you mean '{close[0]}'?)" if close else "")
        if fields:
            msg += f"; allowed: {', '.join(fields)}"
    elif err["type"] == "literal_error":
        msg = f"{msg} (got {err.get('input')!r})"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")  # our validators' own one-line messages
    return f"{where}: {loc}: {msg}"


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """The YAML mapping in ``path``; ``what`` names the kind of file in errors."""
    path = Path(path)
    raw = read_yaml(path, what)
    if not isinstance(raw, dict):
        raise UserInputError(f"{what}: {path} must be a YAML mapping")
    return raw


# Integers beyond a signed 64-bit value cannot be a real count or size (and overflow tables).
MAX_CONFIG_INT = 2**63 - 1


def check_numbers(raw, where: str, path: str = "") -> None:
    """Every number in the tree ``raw`` is finite (no .nan/.inf) and within 64-bit range."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            check_numbers(value, where, f"{path}.{key}" if path else str(key))
    elif isinstance(raw, (list, tuple)):
        for i, value in enumerate(raw):
            check_numbers(value, where, f"{path}.{i}" if path else str(i))
    elif isinstance(raw, float) and not math.isfinite(raw):
        raise UserInputError(f"{where}: {path or 'file'}: Input should be a finite number (got {raw})")
    elif isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > MAX_CONFIG_INT:
        raise UserInputError(f"{where}: {path or 'file'}: {raw:.3g} is out of range; allowed: "
                             f"integers of magnitude up to {MAX_CONFIG_INT}")


def build(model: type[Model], raw, where: str, **extra) -> Model:
    """``model(**raw, **extra)``, with validation errors as one-line UserInputErrors. Non-finite or
    out-of-range numbers anywhere in ``raw`` are refused first."""
    if not isinstance(raw, dict):
        raise UserInputError(f"{where}: must be a YAML mapping")
    check_numbers(raw, where)
    try:
        return model(**raw, **extra)
    except ValidationError as exc:
        raise UserInputError(format_validation_error(exc, where, model)) from None
    except (TypeError, RecursionError) as exc:
        raise UserInputError(f"{where}: {first_line(exc)}") from None
