/* Mutual TLS for every server and channel of the process, and callers' roles (rpc/security.h). */
#define _GNU_SOURCE
#include "rpc/security.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/file.h"
#include "base/log.h"
#include "rpc/internal.h"

#define PEM_MAX_BYTES (1u << 20)
#define SPIFFE_PREFIX "spiffe://tessera/"
#define IDENTITY_MAX  256

static struct {
    bool on;
    char *cert, *key, *ca; /* PEM text, NUL-terminated */
    char identity[IDENTITY_MAX];
} tls;

static _Atomic unsigned long long handshake_failures;

static const char *const role_names[] = {"chief", "ps", "worker", "client"};

/* ---- identities --------------------------------------------------------------------------- */

/* The role bit of the text before the first '/' of s, 0 when it names none. */
static unsigned role_of(const char *s)
{
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);

    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++)
        if (strlen(role_names[i]) == n && memcmp(role_names[i], s, n) == 0)
            return 1u << i;
    return 0;
}

unsigned rpc_identity_roles(const char *identity)
{
    if (identity == NULL)
        return 0;
    if (strncmp(identity, SPIFFE_PREFIX, strlen(SPIFFE_PREFIX)) == 0)
        identity += strlen(SPIFFE_PREFIX);
    else if (strstr(identity, "://") != NULL)
        return 0; /* another URI: not a Tessera role */
    /* ROLE/NAME with a non-empty NAME */
    const char *slash = strchr(identity, '/');
    if (slash == NULL || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return 0;
    return role_of(identity);
}

const char *rpc_roles_describe(unsigned roles, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
        if (!(roles & (1u << i)))
            continue;
        int n = snprintf(buf + off, len - off, "%s%s", off ? ", " : "", role_names[i]);
        if (n < 0 || (size_t)n >= len - off)
            break;
        off += (size_t)n;
    }
    if (off == 0)
        snprintf(buf, len, "no role");
    return buf;
}

/* The roles of an identity list: identities joined by ',' (a certificate's several URIs). */
static unsigned identity_list_roles(const char *ids)
{
    unsigned roles = 0;

    for (const char *p = ids; *p != '\0';) {
        char one[IDENTITY_MAX];
        size_t n = strcspn(p, ",");
        snprintf(one, sizeof(one), "%.*s", (int)n, p);
        roles |= rpc_identity_roles(one);
        p += n + (p[n] == ',');
    }
    return roles;
}

/* The identity of a certificate: its Tessera SAN URIs joined by ',', else its CN. */
static void cert_identity(const X509 *x, char *out, size_t len)
{
    GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    size_t off = 0;

    out[0] = '\0';
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        if (g->type != GEN_URI)
            continue;
        const char *u = (const char *)ASN1_STRING_get0_data(g->d.uniformResourceIdentifier);
        if (u == NULL || rpc_identity_roles(u) == 0)
            continue;
        int n = snprintf(out + off, len - off, "%s%s", off ? "," : "", u);
        if (n < 0 || (size_t)n >= len - off)
            break;
        off += (size_t)n;
    }
    GENERAL_NAMES_free(names);
    if (off == 0) {
        X509_NAME *subject = X509_get_subject_name(x);
        if (X509_NAME_get_text_by_NID(subject, NID_commonName, out, (int)len) < 0)
            out[0] = '\0';
    }
}

/* ---- loading ------------------------------------------------------------------------------ */

static status_t read_pem(const char *flag, const char *path, char **ret, status_msg_t *err)
{
    size_t len;
    status_msg_t why = {0};

    if (file_read_all(path, flag, PEM_MAX_BYTES, ret, &len, &why) != STATUS_OK)
        return status_fail(err, STATUS_BAD_CONFIG, "--%s: %s", flag, why.text);
    if (strlen(*ret) != len || strstr(*ret, "-----BEGIN ") == NULL)
        return status_fail(err, STATUS_BAD_CONFIG, "--%s %s is not a PEM file", flag, path);
    return STATUS_OK;
}

/* Parses and checks the loaded PEM text; fills tls.identity. */
static status_t check_material(const char *cert_file, const char *key_file, const char *ca_file,
                               status_msg_t *err)
{
    BIO *cb = BIO_new_mem_buf(tls.cert, -1), *kb = BIO_new_mem_buf(tls.key, -1),
        *ab = BIO_new_mem_buf(tls.ca, -1);
    X509 *cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
    STACK_OF(X509) *chain = sk_X509_new_null();
    EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    status_t rc = STATUS_OK;
    int n_ca = 0;
    X509 *x;

    if (cert == NULL) {
        rc = status_fail(err, STATUS_BAD_CONFIG, "--tls-cert %s holds no PEM certificate",
                         cert_file);
        goto out;
    }
    while (cb != NULL && (x = PEM_read_bio_X509(cb, NULL, NULL, NULL)) != NULL)
        sk_X509_push(chain, x); /* intermediates after the leaf */
    if (key == NULL) {
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "--tls-key %s holds no PEM private key (encrypted keys are not "
                         "supported)",
                         key_file);
        goto out;
    }
    if (X509_check_private_key(cert, key) != 1) {
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "--tls-key %s is not the key of the certificate in --tls-cert %s",
                         key_file, cert_file);
        goto out;
    }
    while (ab != NULL && (x = PEM_read_bio_X509(ab, NULL, NULL, NULL)) != NULL) {
        X509_STORE_add_cert(store, x);
        X509_free(x);
        n_ca++;
    }
    if (n_ca == 0) {
        rc = status_fail(err, STATUS_BAD_CONFIG, "--tls-ca %s holds no PEM certificate", ca_file);
        goto out;
    }
    if (X509_STORE_CTX_init(ctx, store, cert, chain) != 1 || X509_verify_cert(ctx) != 1) {
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "--tls-cert %s does not verify against --tls-ca "
                         "%s: %s",
                         cert_file, ca_file,
                         X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
        goto out;
    }
    cert_identity(cert, tls.identity, sizeof(tls.identity));
    if (identity_list_roles(tls.identity) == 0)
        LOG_WARNING(RPC,
                    "the certificate in %s names no Tessera role (SAN URI %sROLE/NAME or CN "
                    "ROLE/NAME): other tasks will refuse its calls",
                    cert_file, SPIFFE_PREFIX);
out:
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    EVP_PKEY_free(key);
    sk_X509_pop_free(chain, X509_free);
    X509_free(cert);
    BIO_free(cb);
    BIO_free(kb);
    BIO_free(ab);
    return rc;
}

status_t rpc_security_init(const char *cert_file, const char *key_file, const char *ca_file,
                           status_msg_t *err)
{
    int given = (cert_file != NULL) + (key_file != NULL) + (ca_file != NULL);

    if (given == 0)
        return STATUS_OK;
    if (given != 3)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "mutual TLS needs all of --tls-cert, --tls-key and --tls-ca (missing "
                           "%s)",
                           cert_file == NULL  ? "--tls-cert"
                           : key_file == NULL ? "--tls-key"
                                              : "--tls-ca");
    rpc_security_done();
    if (read_pem("tls-cert", cert_file, &tls.cert, err) != STATUS_OK ||
        read_pem("tls-key", key_file, &tls.key, err) != STATUS_OK ||
        read_pem("tls-ca", ca_file, &tls.ca, err) != STATUS_OK ||
        check_material(cert_file, key_file, ca_file, err) != STATUS_OK) {
        rpc_security_done();
        return STATUS_BAD_CONFIG;
    }
    tls.on = true;
    return STATUS_OK;
}

void rpc_security_done(void)
{
    if (tls.key != NULL)
        memset(tls.key, 0, strlen(tls.key));
    free(tls.cert);
    free(tls.key);
    free(tls.ca);
    memset(&tls, 0, sizeof(tls));
}

unsigned rpc_security_cert_roles(const struct x509_st *cert)
{
    char id[IDENTITY_MAX];

    if (cert == NULL)
        return 0;
    cert_identity(cert, id, sizeof(id));
    return identity_list_roles(id);
}

bool rpc_security_enabled(void)
{
    return tls.on;
}

const char *rpc_security_identity(void)
{
    return tls.identity;
}

void rpc_security_pem(const char **ret_cert, const char **ret_key, const char **ret_ca)
{
    *ret_cert = tls.on ? tls.cert : NULL;
    *ret_key = tls.on ? tls.key : NULL;
    *ret_ca = tls.on ? tls.ca : NULL;
}

unsigned long long rpc_security_handshake_failures(void)
{
    return atomic_load(&handshake_failures);
}

void rpc_security_note_log(const char *message)
{
    if (strstr(message, "Handshake failed") != NULL)
        atomic_fetch_add(&handshake_failures, 1);
}

/* ---- credentials -------------------------------------------------------------------------- */

/* gRPC 1.51's C API has no way to raise the lowest TLS version of its SSL credentials; the C++
 * classes behind them do (grpc_ssl_credentials::set_min_tls_version, a plain non-virtual member
 * that libgrpc exports). Called through its symbol with the credentials as `this`: the
 * credentials handle points at that object (single inheritance), and the Itanium C++ ABI passes
 * `this` as the first argument. Looked up at run time, so a libgrpc without it is refused with
 * a clear error rather than failing to link. */
typedef void (*set_min_tls_fn)(void *creds, grpc_tls_version v);

static set_min_tls_fn min_tls_setter(const char *symbol, status_msg_t *err)
{
    set_min_tls_fn f;
    void *p = dlsym(RTLD_DEFAULT, symbol);

    if (p == NULL) {
        status_fail(err, STATUS_SYSTEM,
                    "this libgrpc (%s) cannot restrict TLS to version 1.3 (no %s): mutual TLS "
                    "needs libgrpc29 1.51 as Debian 12 ships it",
                    grpc_version_string(), symbol);
        return NULL;
    }
    memcpy(&f, &p, sizeof(f));
    return f;
}

grpc_server_credentials *rpc_security_server_creds(status_msg_t *err)
{
    set_min_tls_fn set_min = min_tls_setter(
        "_ZN27grpc_ssl_server_credentials19set_min_tls_versionE16grpc_tls_version", err);
    grpc_ssl_pem_key_cert_pair pair = {tls.key, tls.cert};
    grpc_ssl_server_certificate_config *cfg;
    grpc_ssl_server_credentials_options *opts;
    grpc_server_credentials *creds;

    if (set_min == NULL)
        return NULL;
    cfg = grpc_ssl_server_certificate_config_create(tls.ca, &pair, 1);
    opts = grpc_ssl_server_credentials_create_options_using_config(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, cfg);
    creds = grpc_ssl_server_credentials_create_with_options(opts);
    if (creds == NULL) {
        status_fail(err, STATUS_BAD_CONFIG, "gRPC refused the TLS certificate or key");
        return NULL;
    }
    set_min(creds, TLS1_3);
    return creds;
}

grpc_channel_credentials *rpc_security_channel_creds(status_msg_t *err)
{
    set_min_tls_fn set_min =
        min_tls_setter("_ZN20grpc_ssl_credentials19set_min_tls_versionE16grpc_tls_version", err);
    grpc_ssl_pem_key_cert_pair pair = {tls.key, tls.cert};
    grpc_channel_credentials *creds;

    if (set_min == NULL)
        return NULL;
    creds = grpc_ssl_credentials_create(tls.ca, &pair, NULL, NULL);
    if (creds == NULL) {
        status_fail(err, STATUS_BAD_CONFIG, "gRPC refused the TLS certificate or key");
        return NULL;
    }
    set_min(creds, TLS1_3);
    return creds;
}

/* ---- callers ------------------------------------------------------------------------------ */

bool rpc_security_peer(grpc_call *call, unsigned *ret_roles, char *who, size_t len)
{
    grpc_auth_context *ac = grpc_call_auth_context(call);
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;
    bool over_tls = false;
    unsigned roles = 0;
    size_t off = 0;
    char cn[IDENTITY_MAX] = "";

    *ret_roles = 0;
    snprintf(who, len, "an unauthenticated caller");
    if (ac == NULL)
        return false;
    it = grpc_auth_context_property_iterator(ac);
    while ((p = grpc_auth_property_iterator_next(&it)) != NULL) {
        char v[IDENTITY_MAX];
        size_t n = p->value_length < sizeof(v) - 1 ? p->value_length : sizeof(v) - 1;
        memcpy(v, p->value, n);
        v[n] = '\0';
        if (strcmp(p->name, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME) == 0) {
            over_tls = strcmp(v, GRPC_SSL_TRANSPORT_SECURITY_TYPE) == 0;
        } else if (strcmp(p->name, GRPC_PEER_URI_PROPERTY_NAME) == 0) {
            unsigned r = rpc_identity_roles(v);
            if (r == 0)
                continue;
            roles |= r;
            int k = snprintf(who + off, len - off, "%s%s", off ? "," : "", v);
            if (k > 0 && (size_t)k < len - off)
                off += (size_t)k;
        } else if (strcmp(p->name, GRPC_X509_CN_PROPERTY_NAME) == 0) {
            snprintf(cn, sizeof(cn), "%s", v);
        }
    }
    grpc_auth_context_release(ac);
    if (!over_tls)
        return false;
    if (off == 0) {
        roles = rpc_identity_roles(cn);
        snprintf(who, len, "%s", cn[0] ? cn : "a certificate without a name");
    }
    *ret_roles = roles;
    return true;
}
