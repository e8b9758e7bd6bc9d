"""``python -m accelbackends_sitepolicy [FILE]``: check a site policy and show what it says.

Without FILE, the policy in force is shown: ``ACCELBACKENDS_SITEPOLICY_FILE`` and the other
``ACCELBACKENDS_SITEPOLICY_*`` variables, as ``init()`` will read them. Exit code 0 when the
policy is valid, 2 (with the error on stderr) when it is not.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from accelbackends import plugin

from .policy import FILE, VARIABLES, load_policy, policy_from_environment, policy_from_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m accelbackends_sitepolicy",
        description="Check a site policy for accelbackends and show what it says.",
        epilog="variables: " + "; ".join(f"{k}: {v}" for k, v in VARIABLES.items()),
    )
    parser.add_argument("file", nargs="?", help=f"a policy file to check (default: ${FILE})")
    args = parser.parse_args(argv)
    try:
        if args.file:
            policy = policy_from_environment(os.environ, policy_from_file(args.file, "FILE"))
            origin = args.file
        else:
            policy = load_policy(os.environ)
            origin = os.environ.get(FILE, "").strip() or "no file"
    except plugin.ConfigError as exc:
        print(f"accelbackends-sitepolicy: error: {exc}", file=sys.stderr)
        return 2
    print(f"site policy ({origin}):")
    for line in policy.describe() or ["nothing: backend options are left as they are"]:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
