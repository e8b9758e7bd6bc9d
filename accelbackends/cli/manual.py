"""``accelbackends docs``: the user guide that ships inside the package.

The project has no public web site, so the documentation travels with the code: the wheel
carries the guide's Markdown pages as ``accelbackends/_docs`` (``pyproject.toml`` maps the source
tree's ``docs/`` there), the sdist carries ``docs/`` itself, and a source checkout or an editable
install reads ``docs/`` beside the package. ``accelbackends docs`` lists the pages,
``accelbackends docs PAGE`` prints one, ``accelbackends docs --path`` prints the folder (to build
the HTML site with mkdocs, or to open in an editor).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..plugin.errors import ConfigError
from ..plugin.text import did_you_mean

__all__ = ["find_folder", "folder", "listing", "page_text", "pages"]

_TITLE = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def find_folder() -> Path | None:
    """The bundled guide (installed wheel), else ``docs/`` of the source tree, else None."""
    package = Path(__file__).resolve().parents[1]  # accelbackends/
    for candidate in (package / "_docs", package.parent / "docs"):
        if (candidate / "index.md").is_file():
            return candidate
    return None


def folder() -> Path:
    """The guide's folder, or a ConfigError saying it is not installed."""
    found = find_folder()
    if found is None:
        raise ConfigError(
            "the documentation is not installed with this copy of accelbackends (no _docs folder "
            "in the package and no docs/ beside it); reinstall it from its wheel or sdist"
        )
    return found


def pages() -> dict[str, str]:
    """Each page's name (``launchers/slurm``) and title, in the folder's order."""
    root = folder()
    found = {}
    for path in sorted(root.rglob("*.md")):
        name = path.relative_to(root).with_suffix("").as_posix()
        title = _TITLE.search(path.read_text(errors="replace"))
        found[name] = title.group(1) if title else name
    return found


def page_text(name: str) -> str:
    """The Markdown of page ``name`` (``troubleshooting``, ``launchers/slurm``; ``.md``
    optional). An unknown name is a ConfigError listing the close ones."""
    known = pages()
    wanted = name.strip().removesuffix(".md").strip("/")
    if wanted not in known:
        raise ConfigError(
            f"{name!r} is not a page of the documentation{did_you_mean(wanted, list(known))} "
            "(accelbackends docs lists them)"
        )
    return (folder() / f"{wanted}.md").read_text(errors="replace")


def listing() -> str:
    """What ``accelbackends docs`` prints: where the guide is and its pages."""
    from .text import aligned

    lines = [
        f"documentation: {folder()}",
        "read a page with: accelbackends docs PAGE (e.g. accelbackends docs troubleshooting)",
        "",
    ]
    lines += aligned([[name, title] for name, title in pages().items()], "  ", None)
    return "\n".join(lines)
