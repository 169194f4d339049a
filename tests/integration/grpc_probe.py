#!/usr/bin/python3
"""An independent gRPC client (Debian's python3-grpcio) for the security tests: makes one unary
call with an empty request and prints "CODE: details" ("OK: " on success).

  grpc_probe.py TARGET METHOD [--ca FILE] [--cert FILE --key FILE]

Without --ca the channel is plaintext; with --ca alone it is TLS without a client certificate."""
import argparse
import sys

try:
    import grpc
except ImportError:
    print("SKIP: python3-grpcio is not installed")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("method")
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    a = ap.parse_args()

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    if a.ca:
        creds = grpc.ssl_channel_credentials(
            read(a.ca), read(a.key) if a.key else None, read(a.cert) if a.cert else None)
        channel = grpc.secure_channel(a.target, creds)
    else:
        channel = grpc.insecure_channel(a.target)
    call = channel.unary_unary(a.method, request_serializer=None, response_deserializer=None)
    try:
        call(b"", timeout=5)
        print("OK: ")
    except grpc.RpcError as e:
        print("%s: %s" % (e.code().name, e.details()))
    channel.close()


if __name__ == "__main__":
    main()
