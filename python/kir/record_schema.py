"""The record metadata's JSON schemas and the key tables of docs/record-format.md,
generated from the one field table (kir/record/metadata.hpp, exported as
`kir._core.record_format()["metadata"]`): nothing here names a key.

    python -m kir.record_schema ROOT          # rewrite ROOT/docs/schemas/record-v*.schema.json
                                              # and the tables in ROOT/docs/record-format.md
    python -m kir.record_schema --check ROOT  # exit 1 when a checked-in file differs

A schema describes a version's metadata as JSON: a msgpack `bin` as lowercase hex
(`as_json`). One file per format version: a version, once written, never changes
(docs/record-format.md, "Compatibility"), so neither does its schema.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kir.record import FORMAT, METADATA_TABLES, VERSIONS

__all__ = ["as_json", "doc_tables", "json_schema", "main", "schema_path", "write"]

DOC_BEGIN = "<!-- generated from kir/record/metadata.hpp by `python -m kir.record_schema`: do not edit -->"
DOC_END = "<!-- end of generated tables -->"
HEX32 = "^[0-9a-f]{32}$"
U32 = 0xFFFF_FFFF


def schema_path(root: Path, version: int) -> Path:
    return Path(root) / "docs" / "schemas" / f"record-v{version}.schema.json"


def _in(field: dict, version: int) -> bool:
    return field["first"] <= version and (not field["until"] or version <= field["until"])


_UINT32 = {"type": "integer", "minimum": 1, "maximum": U32}
#: The JSON Schema of a value of each field type (kir/record/metadata.hpp metadata::Type).
_TYPES = {
    "str": lambda f: {"type": "string"},
    "choice": lambda f: {"enum": list(f["choices"])},
    "hash": lambda f: {"type": "string", "pattern": HEX32},
    "sint": lambda f: {"type": "integer"},
    "uint": lambda f: {"type": "integer", "minimum": f["low"], "maximum": f["high"]},
    "number": lambda f: {"type": "number"},
    "boolean": lambda f: {"type": "boolean"},
    "dims": lambda f: {"type": "array", "minItems": 3, "maxItems": 3, "items": _UINT32},
    "bins": lambda f: {"type": "array", "items": {"type": "string", "pattern": "^([0-9a-f]{2})*$"}},
    "chunks": lambda f: {"type": "array", "items": {"type": "string", "pattern": HEX32}},
    "map": lambda f: {"$ref": f"#/$defs/{f['table']}"},
    "maps": lambda f: {"type": "array", "items": {"$ref": f"#/$defs/{f['table']}"}},
}


def _value_schema(field: dict) -> dict:
    out = _TYPES[field["type"]](field)
    return {"anyOf": [out, {"type": "null"}]} if field["nullable"] else out


def json_schema(version: int) -> dict:
    """The JSON Schema (2020-12) of a version's metadata (one of kir.record.VERSIONS),
    as `as_json` renders it."""
    defs = {}
    used = {FORMAT["metadata"]["root"]} | {f["table"] for t in METADATA_TABLES.values() for f in t["fields"]
                                           if f.get("table") and _in(f, version)}
    for name, table in METADATA_TABLES.items():
        if name not in used:  # a table only later versions have (tolerance: 3)
            continue
        fields = [f for f in table["fields"] if _in(f, version)]
        properties = {f["key"]: _value_schema(f) for f in fields}
        if name == FORMAT["metadata"]["root"]:
            properties["version"] = {"const": version}
        defs[name] = {"type": "object", "required": [f["key"] for f in fields if f["since"] <= version],
                      "properties": properties, "additionalProperties": False}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://kir.invalid/schemas/record-v{version}.schema.json",
            "title": f"kir record metadata, format version {version}",
            "description": "The msgpack map of a .kirrec body (docs/record-format.md) as JSON, a bin as lowercase "
                           "hex. Generated from kir/record/metadata.hpp by `python -m kir.record_schema`.",
            "$ref": f"#/$defs/{FORMAT['metadata']['root']}", "$defs": defs}


def as_json(value):
    """Metadata (as msgpack decodes it) as JSON values: bin as lowercase hex."""
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value.hex() if isinstance(value, bytes) else value


def _type_text(field: dict) -> str:
    kind = field["type"]
    if kind == "uint":
        low, high = field["low"], field["high"]
        text = "uint" if (low, high) == (0, 2**64 - 1) else f"uint {low}..{high}"
    elif kind == "choice":
        text = " or ".join(f"`{c}`" for c in field["choices"])
    elif kind == "map":
        text = f"`{field['table']}`"
    elif kind == "maps":
        text = f"list of `{field['table']}`"
    elif kind == "chunks":
        text = "list of hash"
    elif kind == "bins":
        text = "list of bin"
    elif kind == "dims":
        text = "[x, y, z]"
    else:
        text = kind
    return text + " or nil" if field["nullable"] else text


def _versions_text(field: dict) -> str:
    last = VERSIONS[-1]
    if field["until"]:
        span = f"{field['since']}" if field["since"] == field["until"] else f"{field['since']}-{field['until']}"
    else:
        span = f"{field['since']}" if field["since"] == last else f"{field['since']}-"
    return f"{span} (optional in 1)" if field["first"] < field["since"] else span


def doc_tables() -> str:
    """The metadata's key tables, as docs/record-format.md holds them between its markers."""
    lines = [DOC_BEGIN, ""]
    for name, table in METADATA_TABLES.items():
        lines += [f"`{name}`: {table['doc']}.", "", "| key | type | versions | holds |", "| --- | --- | --- | --- |"]
        lines += [f"| `{f['key']}` | {_type_text(f)} | {_versions_text(f)} | {f['doc']} |" for f in table["fields"]]
        lines.append("")
    return "\n".join(lines + [DOC_END])


def write(root: Path, check: bool = False) -> list[Path]:
    """Write (or, with `check`, compare) every version's schema and the doc's tables;
    the files that differed."""
    root = Path(root)
    wanted = {schema_path(root, v): json.dumps(json_schema(v), indent=2) + "\n" for v in VERSIONS}
    doc = root / "docs" / "record-format.md"
    text = doc.read_text()
    begin, end = text.index(DOC_BEGIN), text.index(DOC_END) + len(DOC_END)
    wanted[doc] = text[:begin] + doc_tables() + text[end:]
    differ = [p for p, content in wanted.items() if not p.exists() or p.read_text() != content]
    if not check:
        for path in differ:
            path.write_text(wanted[path])
    return differ


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    roots = [a for a in args if a != "--check"]
    if len(roots) != 1:
        print("usage: python -m kir.record_schema [--check] ROOT", file=sys.stderr)
        return 2
    differ = write(Path(roots[0]), check)
    for path in differ:
        print(f"{path}: {'differs from the field table' if check else 'written'}")
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
