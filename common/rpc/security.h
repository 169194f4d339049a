/* Transport security of the RPC runtime: mutual TLS 1.3 from PEM files, and who may call what.
 *
 * Security is a property of the process: once rpc_security_init() has read a certificate, its
 * key and the cluster's CA, every server (rpc_server_new) requires a client certificate signed
 * by that CA and every channel (rpc_channel_new) presents the certificate and checks the
 * server's against the CA and the target's host name. Both sides refuse TLS below 1.3.
 *
 * A caller's identity is its certificate's SAN URIs spiffe://tessera/ROLE/NAME (one per role it
 * holds; `tessera certs issue` writes them), or, without such a URI, its subject CN ROLE/NAME.
 * ROLE is chief, ps, worker or client; the method table (rpc/methods.h) names the roles that may
 * call each method. Servers answer a call from another role with PERMISSION_DENIED naming the
 * method and the caller, and a call that came over a plaintext health port (rpc_server_opts_t.
 * health_listen) to anything but grpc.health.v1.Health with UNAUTHENTICATED. */
#ifndef TESSERA_RPC_SECURITY_H
#define TESSERA_RPC_SECURITY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Reads and checks the PEM files: the certificate and the key must match, the certificate must
 * be valid now and issued by the CA. All three names or none (then this does nothing and the
 * process stays plaintext). `source` names where they came from in errors ("flag", "config
 * file"). Errors name the file, never its contents. Call before any server or channel is made;
 * once per process. */
status_t rpc_security_init(const char *cert_file, const char *key_file, const char *ca_file,
                           status_msg_t *err);

/* Forgets the material (at exit; servers and channels made before keep their copy). */
void rpc_security_done(void);

bool rpc_security_enabled(void);

/* This process's identity, "spiffe://tessera/ps/0" (or the CN), "" without TLS. */
const char *rpc_security_identity(void);

/* The roles (RPC_ROLE_* bits) one identity string gives: a SAN URI spiffe://tessera/ROLE/NAME
 * or a CN ROLE/NAME; 0 for anything else. */
unsigned rpc_identity_roles(const char *identity);

/* The roles a certificate carries (its Tessera SAN URIs, else its CN): for connections beside
 * gRPC that check their peer's certificate themselves (the ring all-reduce). */
struct x509_st;
unsigned rpc_security_cert_roles(const struct x509_st *cert);

/* Names the roles of a mask, "chief, worker", into buf. */
const char *rpc_roles_describe(unsigned roles, char *buf, size_t len);

/* The PEM text rpc_security_init read (all NULL without TLS), for a data plane beside gRPC
 * that secures its own connections with the same identity (the ring all-reduce). */
void rpc_security_pem(const char **ret_cert, const char **ret_key, const char **ret_ca);

/* TLS handshakes this process refused or failed (no certificate, one from another CA, an old
 * protocol version), counted from gRPC's own report. */
unsigned long long rpc_security_handshake_failures(void);

#endif
