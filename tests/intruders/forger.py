"""An intruder with nothing but the standard library that forges rank 0's verdict.

It waits until rank 0 publishes its nonce, then writes an unsigned "admitted" verdict: the
other ranks refuse it, and rank 0 must learn that they did instead of waiting for them in
``init_process_group``.

    python forger.py PORT PREFIX [SECONDS]

It keeps writing the forged verdict for SECONDS (10) after the first time.
"""

from __future__ import annotations

import json
import struct
import sys
import time

from stdlib_client import SET, _string, connect  # the same raw protocol, one writer of it

WAIT = 6  # torch's TCPStore query: answered once the key exists


def main() -> int:
    port, prefix = int(sys.argv[1]), sys.argv[2]
    connection = connect(port, timeout=60)
    if connection is None:
        return 3
    with connection:
        connection.sendall(struct.pack("<BQ", WAIT, 1) + _string(prefix + "nonce"))
        connection.recv(1)  # the server answers once rank 0 has set its nonce
        data = json.dumps({"ok": True, "message": "", "mac": ""}).encode()
        forged = (
            struct.pack("<B", SET)
            + _string(prefix + "verdict")
            + struct.pack("<Q", len(data))
            + data
        )
        connection.sendall(forged)
        print("forger: verdict written", flush=True)
        # Written again and again: rank 0's own verdict is replaced before the ranks read it.
        until = time.monotonic() + float(sys.argv[3] if len(sys.argv) > 3 else 10)
        while time.monotonic() < until:
            try:
                connection.sendall(forged)
            except OSError:
                break  # rank 0's store is gone
            time.sleep(0.002)
    return 0


if __name__ == "__main__":
    sys.exit(main())
