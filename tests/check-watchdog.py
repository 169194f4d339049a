#!/usr/bin/python3
"""A daemon started as systemd starts a Type=notify service with WatchdogSec= (NOTIFY_SOCKET and
WATCHDOG_USEC in its environment) says READY=1, then pings WATCHDOG=1 on the notify socket at
least every half of WATCHDOG_USEC, and STOPPING=1 on SIGTERM. Run for each daemon by meson."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

WATCHDOG_USEC = 400000  # the daemon should ping every <= 200 ms


def main():
    build = os.environ["TESSERA_BUILD_DIR"]
    failures = 0
    for prog in ("tessera-ps", "tessera-worker", "tessera-chief"):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "notify")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            sock.settimeout(5)
            env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC=str(WATCHDOG_USEC))
            env.pop("WATCHDOG_PID", None)
            args = [os.path.join(build, prog), "--listen=127.0.0.1:0",
                    "--metrics-listen=127.0.0.1:0"]
            proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
            pings, ready, stopping = [], False, False
            try:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and len(pings) < 6:
                    msg = sock.recv(4096).decode()
                    ready |= "READY=1" in msg.split("\n")
                    if "WATCHDOG=1" in msg.split("\n"):
                        pings.append(time.monotonic())
                proc.send_signal(signal.SIGTERM)
                end = time.monotonic() + 10
                while time.monotonic() < end and not stopping:
                    stopping |= "STOPPING=1" in sock.recv(4096).decode().split("\n")
                rc = proc.wait(10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                sock.close()
            gaps = [b - a for a, b in zip(pings, pings[1:])]
            worst = max(gaps) if gaps else float("inf")
            ok = ready and len(pings) >= 6 and worst <= WATCHDOG_USEC / 1e6 and stopping and rc == 0
            print("%-15s READY=1 %s, %d WATCHDOG=1 pings, longest gap %.0f ms (limit %d), "
                  "STOPPING=1 %s, exit %d: %s" % (prog, ready, len(pings), worst * 1e3,
                                                  WATCHDOG_USEC // 1000, stopping, rc,
                                                  "ok" if ok else "FAILED"))
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
