"""Undoing what ``init()`` writes into ``os.environ``.

``init()`` and the plugins it calls set variables on the way (``GLOO_SOCKET_IFNAME``, a
backend's ``env_defaults``, oneCCL's ``CCL_*`` before its import, Habana's module id at bind).
Rather than route every one of those writes through a wrapper (plugins write ``os.environ``
directly, and must keep doing so where a vendor library reads it at import), the core takes a
snapshot before its first step and compares: whatever differs afterwards is what ``init()`` did.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["EnvironmentChanges"]


class EnvironmentChanges:
    """The variables changed in ``environ`` since this object was made, and how to undo them.

    ``undo`` before ``keep`` (a failed ``init()``) puts ``environ`` back exactly as it
    was. After ``keep`` (a successful one), ``undo`` (``destroy()``) restores only the
    variables still holding the value ``init()`` left: one the user changed since is theirs.
    """

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        self._environ: MutableMapping[str, str] = os.environ if environ is None else environ
        self._before = dict(self._environ)
        self._left: dict[str, str | None] | None = None

    def changed(self) -> dict[str, str | None]:
        """Each variable that differs from the snapshot, with its value now (None: unset)."""
        now = self._environ
        keys = {key for key in now if now.get(key) != self._before.get(key)}
        keys |= self._before.keys() - now.keys()
        return {key: now.get(key) for key in sorted(keys)}

    def keep(self) -> None:
        """Remember the changes as ``init()``'s, for ``undo`` at ``destroy()``."""
        self._left = self.changed()

    def undo(self) -> None:
        """Restore the variables changed since the snapshot (see the class docstring)."""
        left = self.changed() if self._left is None else self._left
        for key, value in left.items():
            if self._environ.get(key) != value:
                continue  # changed again since init() left it: not ours to undo
            before = self._before.get(key)
            if before is None:
                self._environ.pop(key, None)
            else:
                self._environ[key] = before
        self._left = {}
