/* Fuzz target: safetensors files (common/files/safetensors.h) and the JSON reader under their
 * headers (files/json.h), which checkpoint manifests go through too.
 *
 * Input: the file, written to a memfd and opened by path as a checkpoint's shards are. The same
 * bytes are also parsed as a JSON document of their own. */
#include <stdlib.h>
#include <string.h>

#include "files/json.h"
#include "files/safetensors.h"
#include "fuzz_common.h"

static fuzz_file_t file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz.safetensors");
    return 0;
}

/* Walks every node, checking the tree's links stay inside the document. */
static void walk(const json_doc_t *doc, const json_node_t *n, int depth)
{
    uint32_t count = 0;

    if (depth > JSON_MAX_DEPTH + 1)
        fuzz_fail("json", "a tree %d deep", depth);
    for (const json_node_t *m = json_first(doc, n); m != NULL; m = json_next(doc, m)) {
        if (m < doc->nodes || m >= doc->nodes + doc->n)
            fuzz_fail("json", "a link outside the node array");
        /* (a key holding a NUL cannot be named by a C string) */
        if (n->kind == JSON_OBJECT && strlen(json_key(doc, m)) == m->key_len &&
            json_get(doc, n, json_key(doc, m)) == NULL)
            fuzz_fail("json", "a member its own object cannot find");
        walk(doc, m, depth + 1);
        count++;
    }
    if (count != n->n)
        fuzz_fail("json", "%u members counted, %u recorded", count, n->n);
}

static void fuzz_json(const uint8_t *data, size_t size)
{
    char *copy = fuzz_copy(data, size);
    json_doc_t doc;
    status_msg_t err = {0};
    status_t rc = json_parse(copy, size, "fuzz", &doc, &err);

    if (rc == STATUS_OK)
        walk(&doc, json_root(&doc), 0);
    fuzz_check_error("json", rc, &err);
    json_free(&doc);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file_t *f = NULL;
    status_msg_t err = {0};
    status_t rc;
    uint64_t total = 0;

    fuzz_json(data, size);
    fuzz_file_set(&file, data, size);
    rc = st_open(file.path, &f, &err);
    for (size_t i = 0; rc == STATUS_OK && i < st_count(f); i++) {
        const st_info_t *t = st_info(f, i);
        size_t n = (size_t)(t->end - t->begin);
        if (t->end > size || n != t->elements * st_dtype_size(t->dtype))
            fuzz_fail("safetensors", "tensor %s: bytes [%llu, %llu) of a %zu-byte file", t->name,
                      (unsigned long long)t->begin, (unsigned long long)t->end, size);
        if (st_find(f, t->name) != t)
            fuzz_fail("safetensors", "tensor %s not found by its name", t->name);
        char *buf = malloc(n + 1);
        rc = st_read(f, t, buf, &err);
        free(buf);
        total += n;
    }
    if (rc == STATUS_OK && f != NULL && total > size)
        fuzz_fail("safetensors", "%llu bytes of tensors in a %zu-byte file",
                  (unsigned long long)total, size);
    fuzz_check_error("safetensors", rc, &err);
    st_close(f);
    return 0;
}
