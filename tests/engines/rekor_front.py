"""One origin for a Rekor v2 log, as a public instance has: the tiles and the write API.

    python3 rekor_front.py --port PORT --tiles DIR -- REKOR-SERVER-COMMAND...

rekor-server's POSIX backend writes the checkpoint and the tiles to DIR and serves only
the write API (`POST /api/v2/log/entries`) on its own port; its read side is meant to
be a static file server. This is that file server, on 127.0.0.1:PORT, and it passes
the write API through to the server, which it starts (the command after `--`, whose
`--http-port` it reads) and stops when it is stopped. Standard library only.
"""

import argparse
import http.server
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tiles", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    upstream = "http://127.0.0.1:%s" % command[command.index("--http-port") + 1]
    tiles = os.path.realpath(args.tiles)
    server = subprocess.Popen(command)

    class Front(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = os.path.realpath(os.path.join(tiles, self.path.split("?")[0].lstrip("/")))
            if not path.startswith(tiles + os.sep) or not os.path.isfile(path):
                self.answer(404, b"not found\n", "text/plain")
                return
            with open(path, "rb") as f:
                self.answer(200, f.read(), "application/octet-stream")

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = urllib.request.Request(
                upstream + self.path, data=body, method="POST",
                headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    self.answer(r.status, r.read(), r.headers.get("Content-Type", "application/json"))
            except urllib.error.HTTPError as e:
                self.answer(e.code, e.read(), e.headers.get("Content-Type", "application/json"))

        def answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Front)

    def stop(*_: object) -> None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
