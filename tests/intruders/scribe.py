"""An intruder with nothing but the standard library that writes one key of a job's store, again
and again, once the store listens: an unsigned ``conflict`` that tells the ranks what to do, or
a forged attempt number.

    python scribe.py PORT KEY VALUE [SECONDS]

It keeps writing for SECONDS (10).
"""

from __future__ import annotations

import struct
import sys
import time

from stdlib_client import SET, _string, connect  # the same raw protocol, one writer of it


def main() -> int:
    port, key, value = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
    connection = connect(port, timeout=60)
    if connection is None:
        return 3
    with connection:
        message = struct.pack("<B", SET) + _string(key) + struct.pack("<Q", len(value)) + value
        until = time.monotonic() + float(sys.argv[4] if len(sys.argv) > 4 else 10)
        while time.monotonic() < until:
            try:
                connection.sendall(message)
            except OSError:
                break  # the store is gone
            time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
