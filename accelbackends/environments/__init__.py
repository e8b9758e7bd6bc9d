"""Built-in cluster-environment plugins, one module per launcher; each is an ordinary plugin.

``BUILTIN`` lists them as (plugin name, module path) from the *first asked* to the last: the
registry registers them in reverse, because pluggy asks later registrations first. Third-party
environments are registered after all of them and so are asked before any built-in one.
"""

from __future__ import annotations

BUILTIN: tuple[tuple[str, str], ...] = (
    ("torchrun", "accelbackends.environments.torchrun"),
    ("env", "accelbackends.environments.env"),
    ("single", "accelbackends.environments.single"),
)
