"""Declarative configuration: upstreams, groups, image and text models, accounts and subscriptions
from a TOML file.

`config_load(path=...)` validates the whole file first against the sections' declared entry models
(configuration/sections.py: unknown keys, types, values, the columns' limits, duplicates, references)
and collects every problem; only a file with none is applied, inside one transaction, through each
app's services. Applying a file twice changes nothing: rows are matched by their natural keys and
only differing fields are written; an account's opening balance is credited once, when the account
is created. The schema is documented in docs/configuration.md.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from configuration.sections import SECTIONS, ConfigFile, Entry

SECTION_NAMES = tuple(section.name for section in SECTIONS)
_LABEL_LIMIT = 60


class ConfigError(Exception):
    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: rejected, nothing applied:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass
class Summary:
    counts: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in SECTION_NAMES})

    def add(self, section: str, outcome: str) -> None:
        self.counts[section][outcome] += 1

    @property
    def changed(self) -> bool:
        return any(c["created"] or c["updated"] for c in self.counts.values())

    def lines(self) -> list[str]:
        return [
            f"{section}: {c['created']} created, {c['updated']} updated, {c['unchanged']} unchanged"
            for section, c in self.counts.items()
            if sum(c.values())
        ]


def _problem(error: ErrorDetails, entry: type[Entry]) -> str:
    """One pydantic error in the loader's words: the key, then what is wrong with its value."""
    key = ".".join(str(part) if isinstance(part, str) else f"[{part}]" for part in error["loc"])
    key = key.replace(".[", "[")
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return f"missing required key {key!r}"
    if kind == "extra_forbidden":
        return f"unknown key {key!r}; known: {', '.join(sorted(entry.model_fields))}"
    reasons = {
        "config": error["msg"],
        "literal_error": f"must be one of {ctx.get('expected', '').replace(' or ', ', ')}; got {value!r}",
        "int_type": f"must be a whole number, got {value!r}",
        "float_type": f"must be a number, got {value!r}",
        "bool_type": f"must be true or false, got {value!r}",
        "string_type": f"must be a string, got {value!r}",
        "list_type": f"must be a list, got {value!r}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}, got {value!r}",
        "less_than_equal": f"must be at most {ctx.get('le')}, got {value!r}",
        "finite_number": f"must be a finite number, got {value!r}",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "too_short": f"must have at least {ctx.get('min_length')} item(s)",
        "too_long": f"must be at most {ctx.get('max_length')} characters"
        if isinstance(value, str)
        else f"must have at most {ctx.get('max_length')} items",
    }
    return f"{key} {reasons.get(kind, error['msg'])}"


def _read_entries(data: dict[str, Any], problems: list[str]) -> dict[str, list[tuple[str, Entry]]]:
    """Each section's entries, validated one by one, with the label that names each in messages."""
    parsed: dict[str, list[tuple[str, Entry]]] = {}
    problems += [
        f"unknown section [{name}]; known: {', '.join(SECTION_NAMES)}"
        for name in data
        if name not in SECTION_NAMES
    ]
    for section in SECTIONS:
        raw_entries = data.get(section.name, [])
        parsed[section.name] = []
        if not isinstance(raw_entries, list) or not all(isinstance(e, dict) for e in raw_entries):
            problems.append(f"{section.name}: must be written as [[{section.name}]] tables")
            continue
        for index, raw in enumerate(raw_entries):
            name = section.entry.label(raw)
            if name is not None and len(name) > _LABEL_LIMIT:
                name = name[: _LABEL_LIMIT - 1] + "…"
            label = f"{section.name}[{index}]" + (f" ({name})" if name is not None else "")
            try:
                parsed[section.name].append((label, section.entry.model_validate(raw)))
            except ValidationError as exc:
                problems += [f"{label}: {_problem(e, section.entry)}" for e in exc.errors()]
    return parsed


def _check(parsed: dict[str, list[tuple[str, Entry]]], problems: list[str]) -> None:
    """Rules across entries: keys unique within the file, then references to the file or the database."""
    config = ConfigFile(entries={name: [entry for _, entry in items] for name, items in parsed.items()})
    for section in SECTIONS:
        for key in section.entry.unique:
            names = (key,) if isinstance(key, str) else key
            seen = Counter(
                tuple(getattr(entry, n) for n in names) if len(names) > 1 else getattr(entry, names[0])
                for entry in config.entries[section.name]
            )
            what = names[0] if len(names) == 1 else f"({', '.join(names)})"
            problems += [
                f"{section.name}: {what} {value!r} appears {count} times"
                for value, count in seen.items()
                if count > 1
            ]
    for section in SECTIONS:
        for label, entry in parsed[section.name]:
            problems += [f"{label}: {problem}" for problem in entry.problems(config)]


def config_parse(*, path: Path) -> dict[str, list[Entry]]:
    """Read and validate a config file; raises ConfigError listing every problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found"]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    parsed = _read_entries(data, problems)
    if not problems:
        _check(parsed, problems)
    if problems:
        raise ConfigError(str(path), problems)
    return {name: [entry for _, entry in items] for name, items in parsed.items()}


def config_load(*, path: Path) -> Summary:
    """Validate, then apply the whole file in one transaction; nothing is half-applied."""
    parsed = config_parse(path=path)
    summary = Summary()
    with transaction.atomic():
        for section in SECTIONS:
            for outcome in section.apply(parsed[section.name], path):
                summary.add(section.name, outcome)
    return summary
