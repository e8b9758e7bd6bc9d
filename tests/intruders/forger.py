"""An intruder with nothing but the standard library that forges rank 0's verdict (issue 28).

It waits until rank 0 publishes its nonce, then writes an unsigned "admitted" verdict: the
other ranks refuse it, and rank 0 must learn that they did instead of waiting for them in
``init_process_group``.

    python forger.py PORT PREFIX
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

VALIDATE, SET, WAIT = 0, 1, 6
MAGIC = 0x3C85F7CE  # torch's TCPStore handshake


def _string(text: str) -> bytes:
    data = ("/" + text).encode()  # torch's clients put "/" before every key
    return struct.pack("<Q", len(data)) + data


def main() -> int:
    port, prefix = int(sys.argv[1]), sys.argv[2]
    for _ in range(1200):
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=60)
            break
        except OSError:
            time.sleep(0.05)
    else:
        return 3
    with connection:
        connection.sendall(struct.pack("<BI", VALIDATE, MAGIC))
        connection.sendall(struct.pack("<BQ", WAIT, 1) + _string(prefix + "nonce"))
        connection.recv(1)  # the server answers once rank 0 has set its nonce
        data = json.dumps({"ok": True, "message": "", "mac": ""}).encode()
        connection.sendall(
            struct.pack("<B", SET)
            + _string(prefix + "verdict")
            + struct.pack("<Q", len(data))
            + data
        )
        print("forger: verdict written", flush=True)
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
