"""A small JSON Schema validator: the subset the shipped report schema uses.

Keywords: type (one or a list), const, enum, properties, required, additionalProperties
(false), items, minimum, maximum, oneOf, $ref to ``#/$defs/...``. An unknown keyword is an
error, so the schema cannot quietly use something this validator would ignore.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_ANNOTATIONS = {"$schema", "$defs", "title", "description"}


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[name])


def errors(
    instance: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, at: str = "$"
) -> list[str]:
    """Every violation, as ``path: problem``; empty when ``instance`` is valid."""
    root = root if root is not None else schema
    found: list[str] = []
    for key, rule in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "$ref":
            assert rule.startswith("#/$defs/"), rule
            found += errors(instance, root["$defs"][rule[len("#/$defs/") :]], root, at)
        elif key == "type":
            names = rule if isinstance(rule, list) else [rule]
            if not any(_is(instance, n) for n in names):
                found.append(f"{at}: expected {names}, got {instance!r}")
                return found
        elif key == "const":
            if instance != rule:
                found.append(f"{at}: expected {rule!r}, got {instance!r}")
        elif key == "enum":
            if instance not in rule:
                found.append(f"{at}: {instance!r} not in {rule}")
        elif key == "required":
            if isinstance(instance, dict):
                found += [f"{at}: missing {k!r}" for k in rule if k not in instance]
        elif key == "properties":
            if isinstance(instance, dict):
                for name, sub in rule.items():
                    if name in instance:
                        found += errors(instance[name], sub, root, f"{at}.{name}")
        elif key == "additionalProperties":
            assert rule is False, "only additionalProperties: false is supported"
            if isinstance(instance, dict):
                extra = set(instance) - set(schema.get("properties", {}))
                found += [f"{at}: unexpected key {k!r}" for k in sorted(extra)]
        elif key == "items":
            if isinstance(instance, list):
                for i, item in enumerate(instance):
                    found += errors(item, rule, root, f"{at}[{i}]")
        elif key == "minimum":
            if _is(instance, "number") and instance < rule:
                found.append(f"{at}: {instance} < {rule}")
        elif key == "maximum":
            if _is(instance, "number") and instance > rule:
                found.append(f"{at}: {instance} > {rule}")
        elif key == "oneOf":
            matches = sum(1 for sub in rule if not errors(instance, sub, root, at))
            if matches != 1:
                found.append(f"{at}: matches {matches} of the oneOf alternatives")
        else:
            raise AssertionError(f"schema keyword {key!r} is not supported by this validator")
    return found
