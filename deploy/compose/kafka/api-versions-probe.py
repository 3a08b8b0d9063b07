"""Exit 0 when the Kafka broker at HOST:PORT answers an ApiVersions request, else 1.

The image's health check: a KRaft broker answers only once it is unfenced and has its
metadata, so an answer means clients can use it (a bound port alone does not). Needs
only python3's standard library, not a JVM start every few seconds.
"""

import socket
import struct
import sys


def answers(host: str, port: int, timeout_s: float = 3.0) -> bool:
    client_id = b"healthcheck"
    # Request header v1: api_key 18 (ApiVersions), version 0, correlation id 7, client id.
    request = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            answer = b""
            while len(answer) < 10:
                chunk = sock.recv(64)
                if not chunk:
                    return False
                answer += chunk
    except OSError:
        return False
    correlation_id, error_code = struct.unpack(">ih", answer[4:10])
    return correlation_id == 7 and error_code == 0


if __name__ == "__main__":
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "localhost:9092").rpartition(":")
    sys.exit(0 if answers(host or "localhost", int(port)) else 1)
