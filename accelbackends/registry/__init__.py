"""Floor 3, the registry: the plugins loaded, and the one typed facade through which the rest of
accelbackends asks them anything.

- `facade`: `Registry`, which loads the built-in and third-party plugins and is the only code
  that calls ``pm.hook``; the process's default registry.
- `exits`: a third-party plugin that calls ``os._exit`` while it is imported is failed, not
  obeyed.
- `frames`: tracebacks and warnings that point at the user's and the plugin's code.
- `defaults`: the host's own answers to the policy hooks, asked last.

Running a plugin's code in a thread with a deadline, and the record of the calls given up on,
is `accelbackends.host.guard`'s, one floor down.
"""

from __future__ import annotations

from .facade import *  # noqa: F403  (the facade's public names, as before the move)
from .facade import __all__ as __all__
