/* tessera certs: a cluster CA and the certificates of its tasks and clients, with OpenSSL's
 * libcrypto, so that mutual TLS needs no other PKI tool.
 *
 *   tessera certs init  --dir DIR [--days N] [--force]
 *   tessera certs issue --dir DIR ROLE NAME [--host H]... [--days N] [--force]
 *
 * Keys are ECDSA P-256. A task's certificate serves both ends of its connections (server and
 * client authentication); its identity is one SAN URI spiffe://tessera/ROLE/NAME per role (ROLE
 * may list several, "worker,chief", for worker 0 leading a cluster without a chief) and its CN
 * ROLE/NAME; each --host adds a DNS or IP SAN that peers check when they connect. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "cli.h"
#include "rpc/security.h"

#define MAX_HOSTS    64
#define DAYS_MAX     36500
#define CA_DAYS      3650
#define LEAF_DAYS    365
#define NAME_MAX_LEN 64

typedef struct certs_args {
    const char *dir;
    const char *role, *name;
    const char *hosts[MAX_HOSTS];
    int n_hosts;
    long days;
    bool force;
} certs_args_t;

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: tessera certs init  --dir DIR [--days N] [--force]\n"
            "       tessera certs issue --dir DIR ROLE NAME [--host H]... [--days N] [--force]\n"
            "\n"
            "Makes a cluster CA and the certificates of its tasks and clients (ECDSA P-256).\n"
            "\n"
            "  init         writes DIR/ca.crt and DIR/ca.key (mode 0600), a CA valid for --days\n"
            "               (default %d).\n"
            "  issue        writes DIR/ROLE-NAME.crt and DIR/ROLE-NAME.key signed by DIR's CA,\n"
            "               valid for --days (default %d). ROLE is chief, ps, worker or client,\n"
            "               or a comma list of them (worker,chief: worker 0 leading a cluster\n"
            "               without a chief). The certificate carries the SAN URI\n"
            "               spiffe://tessera/ROLE/NAME for each role and the CN ROLE/NAME.\n"
            "  --dir DIR    where the CA lives and the files are written (made when missing).\n"
            "  --host H     a DNS name or IP address peers reach this task at (repeatable): its\n"
            "               peers check it against the name they dialled.\n"
            "  --days N     validity in days, 1 to %d.\n"
            "  --force      overwrite existing files (never needed to issue more certificates).\n",
            CA_DAYS, LEAF_DAYS, DAYS_MAX);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "tessera certs: <sentence>" and returns 1. */
static int fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "tessera certs: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    ERR_clear_error();
    return 1;
}

/* ---- arguments ---------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, certs_args_t *a)
{
    const char *pos[2];
    int n_pos = 0;

    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '='), *val = NULL;
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) != 0) {
            if (n_pos == 2)
                return fail("unexpected argument \"%s\" (see tessera certs --help)", arg);
            pos[n_pos++] = arg;
            continue;
        }
        if (klen == 7 && strncmp(arg, "--force", 7) == 0 && eq == NULL) {
            a->force = true;
            continue;
        }
        if (eq != NULL)
            val = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            val = argv[++i];
        if ((klen == 5 && strncmp(arg, "--dir", 5) == 0) ||
            (klen == 6 && strncmp(arg, "--host", 6) == 0) ||
            (klen == 6 && strncmp(arg, "--days", 6) == 0)) {
            if (val == NULL || *val == '\0')
                return fail("flag %.*s needs a value", (int)klen, arg);
        } else {
            return fail("unknown flag \"%.*s\" (see tessera certs --help)", (int)klen, arg);
        }
        if (arg[2] == 'd' && arg[3] == 'i') {
            a->dir = val;
        } else if (arg[2] == 'h') {
            if (a->n_hosts == MAX_HOSTS)
                return fail("at most %d --host flags", MAX_HOSTS);
            a->hosts[a->n_hosts++] = val;
        } else {
            char *end;
            errno = 0;
            a->days = strtol(val, &end, 10);
            if (errno != 0 || *end != '\0' || a->days < 1 || a->days > DAYS_MAX)
                return fail("--days \"%s\" is not a whole number of days from 1 to %d", val,
                            DAYS_MAX);
        }
    }
    if (strcmp(argv[1], "issue") == 0) {
        if (n_pos != 2)
            return fail("issue needs ROLE and NAME (see tessera certs --help)");
        a->role = pos[0];
        a->name = pos[1];
    } else if (n_pos != 0) {
        return fail("init takes no argument \"%s\"", pos[0]);
    }
    if (a->dir == NULL)
        return fail("--dir DIR is required");
    return 0;
}

/* Checks ROLE (one role or a comma list of distinct ones) and NAME; fills roles[] in order. */
static int check_identity(const certs_args_t *a, char roles[4][8], int *ret_n)
{
    const char *p = a->role;
    int n = 0;
    unsigned seen = 0;

    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char id[NAME_MAX_LEN + 16];
        snprintf(id, sizeof(id), "%.*s/x", (int)len, p);
        unsigned r = len < 8 ? rpc_identity_roles(id) : 0;
        if (r == 0 || (seen & r))
            return fail("ROLE \"%s\" must be chief, ps, worker or client, or a comma list of "
                        "different ones",
                        a->role);
        seen |= r;
        snprintf(roles[n++], 8, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
    }
    if (n == 0)
        return fail("ROLE \"%s\" is empty", a->role);
    size_t nl = strlen(a->name);
    if (nl == 0 || nl > NAME_MAX_LEN ||
        strspn(a->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-") != nl ||
        a->name[0] == '.')
        return fail("NAME \"%s\" must be 1 to 64 letters, digits, '.', '_' or '-' (not "
                    "starting with '.')",
                    a->name);
    *ret_n = n;
    return 0;
}

/* ---- files -------------------------------------------------------------------------------- */

static int make_dir(const char *dir)
{
    struct stat sb;

    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("cannot make directory %s: %s", dir, strerror(errno));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return fail("%s is not a directory", dir);
    return 0;
}

/* Writes a PEM key (mode 0600) or certificate (0644) to DIR/NAME through a temporary file and
 * rename, refusing to replace an existing file without --force. */
static int write_pem(const char *dir, const char *name, EVP_PKEY *key, X509 *cert, bool force)
{
    char path[4096], tmp[4200];
    FILE *f;
    int fd, ok;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (!force && access(path, F_OK) == 0)
        return fail("%s exists already (--force replaces it)", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, key ? 0600 : 0644);
    if (fd < 0)
        return fail("cannot write %s: %s", tmp, strerror(errno));
    f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        unlink(tmp);
        return fail("cannot write %s: %s", tmp, strerror(errno));
    }
    ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
    ok = ok && fflush(f) == 0 && fsync(fd) == 0;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return fail("cannot write %s: %s", path, strerror(errno ? errno : EIO));
    }
    return 0;
}

static EVP_PKEY *load_key(const char *path)
{
    FILE *f = fopen(path, "r");
    EVP_PKEY *k = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    return k;
}

static X509 *load_cert(const char *path)
{
    FILE *f = fopen(path, "r");
    X509 *x = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    return x;
}

/* ---- certificates ------------------------------------------------------------------------- */

static EVP_PKEY *new_key(void)
{
    return EVP_EC_gen("P-256");
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *e;

    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (e == NULL)
        return -1;
    int ok = X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    return ok ? 0 : -1;
}

/* A certificate for key, named cn, valid from now for days, with a random 127-bit serial. */
static X509 *new_cert(EVP_PKEY *key, const char *cn, long days)
{
    X509 *x = X509_new();
    BIGNUM *serial = BN_new();
    X509_NAME *name;

    if (x == NULL || serial == NULL || !BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
        !BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -300) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), days * 86400L) || !X509_set_pubkey(x, key)) {
        BN_free(serial);
        X509_free(x);
        return NULL;
    }
    BN_free(serial);
    name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"Tessera", -1, -1,
                               0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    return x;
}

static int certs_init(const certs_args_t *a)
{
    EVP_PKEY *key = NULL;
    X509 *ca = NULL;
    int rc = 1;

    if (make_dir(a->dir) != 0)
        return 1;
    key = new_key();
    ca = key ? new_cert(key, "Tessera cluster CA", a->days ? a->days : CA_DAYS) : NULL;
    if (ca == NULL || !X509_set_issuer_name(ca, X509_get_subject_name(ca)) ||
        add_ext(ca, ca, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") != 0 ||
        add_ext(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign") != 0 ||
        add_ext(ca, ca, NID_subject_key_identifier, "hash") != 0 ||
        !X509_sign(ca, key, EVP_sha256())) {
        fail("cannot make the CA: %s", ERR_reason_error_string(ERR_peek_last_error()));
        goto out;
    }
    if (write_pem(a->dir, "ca.key", key, NULL, a->force) != 0 ||
        write_pem(a->dir, "ca.crt", NULL, ca, a->force) != 0)
        goto out;
    printf("wrote %s/ca.crt and %s/ca.key (keep ca.key secret: it signs every certificate)\n",
           a->dir, a->dir);
    rc = 0;
out:
    X509_free(ca);
    EVP_PKEY_free(key);
    return rc;
}

static int certs_issue(const certs_args_t *a)
{
    char roles[4][8], path[4096], san[8192], cn[128], file[128];
    EVP_PKEY *ca_key = NULL, *key = NULL;
    X509 *ca = NULL, *x = NULL;
    size_t off = 0;
    int n_roles = 0, rc = 1;

    if (check_identity(a, roles, &n_roles) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/ca.key", a->dir);
    ca_key = load_key(path);
    if (ca_key == NULL) {
        fail("cannot read the CA's key %s (make it with tessera certs init --dir %s)", path,
             a->dir);
        goto out;
    }
    snprintf(path, sizeof(path), "%s/ca.crt", a->dir);
    ca = load_cert(path);
    if (ca == NULL || X509_check_private_key(ca, ca_key) != 1) {
        fail("%s is missing or is not the certificate of %s/ca.key", path, a->dir);
        goto out;
    }
    for (int i = 0; i < n_roles; i++)
        off += (size_t)snprintf(san + off, sizeof(san) - off, "%sURI:spiffe://tessera/%s/%s",
                                i ? "," : "", roles[i], a->name);
    for (int i = 0; i < a->n_hosts; i++) {
        const char *h = a->hosts[i];
        unsigned char buf[16];
        bool ip = inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
        if (!ip && (strlen(h) > 253 || strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                                                 "VWXYZ0123456789.-*") != strlen(h))) {
            fail("--host \"%s\" is neither an IP address nor a DNS name", h);
            goto out;
        }
        off += (size_t)snprintf(san + off, sizeof(san) - off, ",%s:%s", ip ? "IP" : "DNS", h);
    }
    snprintf(cn, sizeof(cn), "%s/%s", roles[0], a->name);
    key = new_key();
    x = key ? new_cert(key, cn, a->days ? a->days : LEAF_DAYS) : NULL;
    if (x == NULL || !X509_set_issuer_name(x, X509_get_subject_name(ca)) ||
        add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
        add_ext(x, ca, NID_key_usage, "critical,digitalSignature,keyAgreement") != 0 ||
        add_ext(x, ca, NID_ext_key_usage, "serverAuth,clientAuth") != 0 ||
        add_ext(x, ca, NID_subject_key_identifier, "hash") != 0 ||
        add_ext(x, ca, NID_authority_key_identifier, "keyid:always") != 0 ||
        add_ext(x, ca, NID_subject_alt_name, san) != 0 || !X509_sign(x, ca_key, EVP_sha256())) {
        fail("cannot make the certificate: %s", ERR_reason_error_string(ERR_peek_last_error()));
        goto out;
    }
    snprintf(file, sizeof(file), "%s-%s.key", roles[0], a->name);
    if (write_pem(a->dir, file, key, NULL, a->force) != 0)
        goto out;
    snprintf(file, sizeof(file), "%s-%s.crt", roles[0], a->name);
    if (write_pem(a->dir, file, NULL, x, a->force) != 0)
        goto out;
    printf("wrote %s/%s-%s.crt and .key: %s\n", a->dir, roles[0], a->name, san);
    rc = 0;
out:
    X509_free(x);
    X509_free(ca);
    EVP_PKEY_free(key);
    EVP_PKEY_free(ca_key);
    return rc;
}

int cli_certs(int argc, char **argv)
{
    certs_args_t a = {0};

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    if (strcmp(argv[1], "init") != 0 && strcmp(argv[1], "issue") != 0) {
        fprintf(stderr, "tessera certs: unknown subcommand \"%s\" (init or issue)\n", argv[1]);
        return 2;
    }
    if (parse_args(argc, argv, &a) != 0)
        return 2;
    return strcmp(argv[1], "init") == 0 ? certs_init(&a) : certs_issue(&a);
}
