/* Writes the seed corpora of the rpc and error_detail fuzz targets: for rpc one file per request
 * of rpc_seeds.c, named after it, holding [method id as the selector byte][the request as sent];
 * for error_detail a few packed error details behind a status code byte.
 * Usage: fuzz_make_rpc_corpus RPC_DIR ERROR_DETAIL_DIR (tests/fuzz/make-corpus.py runs it). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <grpc/grpc.h>

#include "rpc_seeds.h"
#include "tessera/v1/common.pb-c.h"

static int write_file(const char *dir, const char *name, uint8_t first, const void *data,
                      size_t len)
{
    char path[4096];
    FILE *f;
    int rc = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(&first, 1, 1, f) != 1 || fwrite(data, 1, len, f) != len)
        rc = 1;
    if (f != NULL && fclose(f) != 0)
        rc = 1;
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return rc;
}

/* Error details as servers send them: with and without a task and a culprit. */
static int write_details(const char *dir)
{
    Tessera__V1__ErrorDetail d = TESSERA__V1__ERROR_DETAIL__INIT;
    Tessera__V1__TaskId task = TESSERA__V1__TASK_ID__INIT;
    uint8_t buf[1024];
    int rc = 0;

    d.status = "NOT_FOUND";
    d.reason = "job 'j': variable 'emb' shard 1 is not on this parameter server";
    d.fault = TESSERA__V1__FAULT__FAULT_APPLICATION;
    rc |= write_file(dir, "bare", 5, buf, tessera__v1__error_detail__pack(&d, buf));
    task.type = TESSERA__V1__TASK_TYPE__TASK_TYPE_PS;
    task.index = 1;
    task.address = "10.0.0.2:2223";
    d.task = &task;
    d.culprit = "emb";
    rc |= write_file(dir, "ps-not-found", 5, buf, tessera__v1__error_detail__pack(&d, buf));
    d.status = "RESOURCE_EXHAUSTED";
    d.reason = "the reply would take 300000000 bytes, over the message limit";
    d.fault = TESSERA__V1__FAULT__FAULT_PS;
    d.culprit = "";
    rc |= write_file(dir, "ps-exhausted", 8, buf, tessera__v1__error_detail__pack(&d, buf));
    task.type = TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER;
    task.index = 3;
    d.status = "UNAVAILABLE";
    d.reason = "worker 3 lost its parameter server";
    d.fault = TESSERA__V1__FAULT__FAULT_WORKER;
    rc |= write_file(dir, "worker-unavailable", 14, buf, tessera__v1__error_detail__pack(&d, buf));
    return rc;
}

int main(int argc, char **argv)
{
    rpc_seed_t *seeds;
    size_t n;
    int rc = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s RPC_DIR ERROR_DETAIL_DIR\n", argv[0]);
        return 2;
    }
    grpc_init();
    n = rpc_seeds_build(&seeds);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = write_file(argv[1], seeds[i].name, (uint8_t)seeds[i].id, seeds[i].bytes, seeds[i].len);
    if (rc == 0)
        rc = write_details(argv[2]);
    rpc_seeds_free(seeds, n);
    grpc_shutdown();
    return rc;
}
