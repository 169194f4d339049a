#!/usr/bin/python3
"""An independent gRPC client (Debian's python3-grpcio) for the security tests: makes one unary
call with an empty request and prints "CODE: details" ("OK: " on success).

  grpc_probe.py TARGET METHOD [--ca FILE] [--cert FILE --key FILE] [--gzip-payload N]
  grpc_probe.py --https URL --ca FILE [--tls12]

Without --ca the channel is plaintext; with --ca alone it is TLS without a client certificate.
--gzip-payload N sends, gzip-compressed, a request whose only field is Tessera's payload (field
15) of N patterned bytes, for a method that echoes it (Diagnostics/Echo), and prints "OK: " only
when the answer carries those bytes back.
--https fetches URL with Python's ssl against the CA (--tls12: offering TLS 1.2 only) and
prints "OK: " and the body's first line, or "ERROR: " and why."""
import argparse
import sys

try:
    import grpc
except ImportError:
    print("SKIP: python3-grpcio is not installed")
    sys.exit(77)


def https(url, ca, tls12):
    import ssl
    import urllib.request
    ctx = ssl.create_default_context(cafile=ca)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            print("OK: " + r.read().decode().split("\n")[0])
    except Exception as e:  # the refusal is what the test wants to see
        print("ERROR: %s" % e)


def varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7f) | (0x80 if v > 0x7f else 0))
        v >>= 7
        if not v:
            return bytes(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--https":
        hp = argparse.ArgumentParser()
        hp.add_argument("--https", required=True)
        hp.add_argument("--ca", required=True)
        hp.add_argument("--tls12", action="store_true")
        h = hp.parse_args()
        https(h.https, h.ca, h.tls12)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("method")
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--gzip-payload", type=int, default=None)
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
    request, compression, payload = b"", None, b""
    if a.gzip_payload is not None:
        payload = bytes((i * 7 + (i >> 8)) & 0xff for i in range(a.gzip_payload))
        request = bytes([15 << 3 | 2]) + varint(len(payload)) + payload
        compression = grpc.Compression.Gzip
    try:
        answer = call(request, timeout=5, compression=compression)
        if payload and payload not in answer:
            print("MISMATCH: the answer (%d bytes) does not carry the payload" % len(answer))
        else:
            print("OK: ")
    except grpc.RpcError as e:
        print("%s: %s" % (e.code().name, e.details()))
    channel.close()


if __name__ == "__main__":
    main()
