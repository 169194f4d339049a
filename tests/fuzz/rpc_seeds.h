/* Requests for the rpc fuzz target, built with the project's own encoder (rpc_encode): the
 * seed corpus that make_rpc_corpus writes, and the job every offline parameter server of
 * fuzz_rpc starts with, so that pulls and pushes find variables from the first input on. */
#ifndef TESSERA_FUZZ_RPC_SEEDS_H
#define TESSERA_FUZZ_RPC_SEEDS_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/methods.h"

typedef struct rpc_seed {
    const char *name; /* file name in corpus/rpc/ */
    rpc_method_id_t id;
    uint8_t *bytes; /* the request as sent: packed fields, then the payload as field 15 */
    size_t len;
} rpc_seed_t;

/* Builds every seed request into ret_seeds (malloc'd; free with rpc_seeds_free) and returns how
 * many; aborts when out of memory. */
size_t rpc_seeds_build(rpc_seed_t **ret_seeds);
void rpc_seeds_free(rpc_seed_t *seeds, size_t n);

#endif
