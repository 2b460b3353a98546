"""The envelope of every JSON object a kir command prints (docs/json-schema.md): its
tag first, under `schema` ("kir.cache/1"), then the command's fields.

The commands that first named their tag `format` (kir records, replay, replay --all,
tune, import-mneme, cache) still write it under `format` too, with the same value,
for readers written against them; `format` is deprecated there. Which commands do
is decided here, from the tag, and nowhere else."""
from __future__ import annotations

from kir.errors import OptionError

#: the schema families whose objects also carry the tag under the deprecated `format` key
LEGACY_FORMAT_KEY = frozenset({"kir.records", "kir.replay", "kir.replay-all", "kir.tune", "kir.import-mneme",
                               "kir.cache"})


def envelope(schema: str, **fields) -> dict:
    """{"schema": schema[, "format": schema], **fields}: a command's JSON object."""
    out = {"schema": schema}
    if schema.split("/", 1)[0] in LEGACY_FORMAT_KEY:
        out["format"] = schema
    if "schema" in fields or ("format" in fields and "format" in out):
        raise OptionError(f"{schema}: the fields hold a key the envelope writes (schema, format)")
    out.update(fields)
    return out


def add_json_argument(parser, help: str) -> None:  # noqa: A002 - argparse's own name
    """--json (one document, `help` says which) and --pretty beside it (kir.cli.run_pretty
    indents the document): every verb that prints one JSON document adds both here."""
    parser.add_argument("--json", action="store_true", help=help)
    parser.add_argument("--pretty", action="store_true", help="with --json: the same document indented")


__all__ = ["add_json_argument", "envelope", "LEGACY_FORMAT_KEY"]
