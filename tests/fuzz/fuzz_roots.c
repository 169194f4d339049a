/* Fuzz target: the paths a job names against a daemon's roots (base/roots.h, roots_check) and
 * the identities certificates carry (rpc/security.h, rpc_identity_roles): both read text an
 * attacker writes. The input is a path under a small tree made at start (a root holding a
 * directory, a file, a link inside it and a link out of it, beside an outside directory); the
 * same bytes are then read as an identity.
 *
 * What roots_check promises: a path it lets through resolves, links followed, to the root or
 * below it; a path that does not exist yet has its nearest existing ancestor there and no ".."
 * after it. rpc_identity_roles gives at most one role. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/roots.h"
#include "fuzz_common.h"
#include "rpc/security.h"

static char base[PATH_MAX], root_real[PATH_MAX];
static roots_t roots;

/* The tree goes with the process. */
static void remove_tree(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_roots: could not remove %s\n", base);
    roots_done(&roots);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char dir[] = "/tmp/fuzz-roots-XXXXXX", path[PATH_MAX + 64];
    char *root = path;
    status_msg_t err = {0};

    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(base, sizeof(base), "%s", dir);
    snprintf(path, sizeof(path), "%s/root", base);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/root/a", base);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/outside", base);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/root/a/f", base);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof(path), "%s/root/in", base);
    if (symlink("a", path) != 0)
        abort();
    snprintf(path, sizeof(path), "%s/root/out", base);
    if (symlink("../outside", path) != 0)
        abort();
    snprintf(path, sizeof(path), "%s/root/etc", base);
    if (symlink("/etc", path) != 0)
        abort();
    snprintf(path, sizeof(path), "%s/root", base);
    if (roots_init(&roots, "fuzz", &root, 1, &err) != STATUS_OK ||
        realpath(path, root_real) == NULL)
        abort();
    atexit(remove_tree);
    return 0;
}

static bool below(const char *path)
{
    size_t n = strlen(root_real);
    return strncmp(path, root_real, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The promise for a path let through. */
static void check_inside(const char *path)
{
    char *real = realpath(path, NULL), *copy;

    if (real != NULL) {
        if (!below(real))
            fuzz_fail("roots", "%s was let through but resolves to %s", path, real);
        free(real);
        return;
    }
    if (errno != ENOENT && errno != ENOTDIR)
        return; /* a loop, a name too long: the open that follows fails the same way */
    copy = strdup(path);
    for (char *cut; (cut = strrchr(copy, '/')) != NULL && cut != copy;) {
        *cut = '\0';
        real = realpath(copy, NULL);
        if (real == NULL)
            continue;
        if (!below(real))
            fuzz_fail("roots", "%s was let through but its existing part %s resolves to %s", path,
                      copy, real);
        for (const char *p = path + strlen(copy); *p != '\0';) {
            p += strspn(p, "/");
            size_t len = strcspn(p, "/");
            if (len == 2 && p[0] == '.' && p[1] == '.')
                fuzz_fail("roots", "%s was let through with \"..\" after %s", path, copy);
            p += len;
        }
        free(real);
        break;
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size), *path;
    status_msg_t err = {0};
    status_t rc;
    unsigned r;

    /* mostly under the tree; an input starting with '/' also as itself */
    if (asprintf(&path, "%s/%s", base, text) < 0)
        abort();
    rc = roots_check(&roots, "data.train file", path, &err);
    fuzz_check_error("roots", rc, &err);
    if (rc == STATUS_OK)
        check_inside(path);
    if (text[0] == '/') {
        rc = roots_check(&roots, "data.train file", text, &err);
        fuzz_check_error("roots", rc, &err);
        if (rc == STATUS_OK)
            check_inside(text);
    }
    r = rpc_identity_roles(text);
    if (r & (r - 1))
        fuzz_fail("roots", "the identity \"%.80s\" gives several roles (%#x)", text, r);
    free(path);
    free(text);
    return 0;
}
