"""Sphinx configuration of kir's documentation site: the Markdown pages of docs/ (MyST),
the README as the landing page, CONTRIBUTING.md and CHANGELOG.md, and an API reference
from the docstrings of the installed kir (autodoc), kir._core included.

Build it (CONTRIBUTING.md; tests/packaging/test_docs_site.py does it in CI), warnings
as errors and every cross-reference checked:

    sphinx-build -W --keep-going -n -b html docs build/docs-site

The site's own files (this one, index.md, site/) are not installed with docs/ in the
wheel (CMakeLists.txt); the pages are.
"""
import builtins

import kir

project = "kir"
author = "The kir developers"
release = version = kir.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# kir's docstrings are prose with Markdown-style `code` spans, not Google or NumPy sections
# (so no napoleon): the default role shows them as code rather than as cross-references.
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# No autodoc_default_options["members"]: Sphinx 9 then ignores a directive's own member
# list (docs/site/api/kir.rst); each page says `:members:`.

# No intersphinx: CI builds offline, so the standard library's and other packages'
# inventories cannot be fetched. Annotations naming their classes stay plain text instead
# of each failing -n as an unresolved reference; kir's own names are all resolved.
nitpick_ignore_regex = [
    ("py:class", r"(pathlib|collections\.abc|enum|os|io|subprocess|threading|concurrent\.futures|types)\.\w+"),
]

html_theme = "alabaster"
html_title = f"kir {release}"


def _nanobind_functions(app, docname, source):
    """kir._core's functions are nanobind `nb_func` objects, which autodoc's member scan
    does not take for functions (inspect.isroutine is False for them), though
    `autofunction` documents each from its docstring's signature: list them all on
    the kir._core page, so that a new one cannot be left out."""
    if docname == "site/api/core":
        import kir._core as core
        names = [n for n, v in vars(core).items() if type(v).__name__ == "nb_func" and not n.startswith("_")]
        source[0] += "\nFunctions\n---------\n\n" + "".join(f".. autofunction:: kir._core.{n}\n" for n in names)


def _builtins_exactly(app, doctree):
    """A builtin in an annotation (`type[KirError]`) reaches the Python domain as a
    "refspecific" reference, which then matches every attribute named `type`
    (`more than one target found`); a builtin name is never one of kir's objects."""
    from sphinx.addnodes import pending_xref
    for node in doctree.findall(pending_xref):
        if node.get("refdomain") == "py" and node.hasattr("refspecific") and hasattr(builtins, node["reftarget"]):
            del node["refspecific"]


def _factory_defaults(app, what, name, obj, options, signature, return_annotation):
    """A dataclass field with a default_factory shows its default as `<factory>`, which is
    no Python expression: Sphinx then parses the whole signature by splitting at commas,
    and an annotation such as `dict[str, int]` falls apart into unresolvable pieces. Show
    such a default as `...` (a computed default), which parses."""
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-signature", _factory_defaults)
    app.connect("source-read", _nanobind_functions)
    app.connect("doctree-read", _builtins_exactly)
