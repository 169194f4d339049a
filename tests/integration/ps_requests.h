/* Requests to a real tessera-ps, built field by field so that tests control every byte: shard
 * descriptions, optimizer messages, pulls and dense or row pushes. Shared by the parameter
 * server's integration suites. */
#ifndef TESSERA_TEST_PS_REQUESTS_H
#define TESSERA_TEST_PS_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/client.h"

/* One shard description with the storage its pointers need. */
typedef struct var_desc {
    Tessera__V1__VariableShard msg;
    Tessera__V1__Initializer init;
    Tessera__V1__Initializer__Constant constant;
    Tessera__V1__Initializer__GlorotUniform glorot;
    int64_t shape[2], full[2];
} var_desc_t;

/* An optimizer message: SGD with lr, or Adam with lr when adam is set. */
typedef struct opt_desc {
    Tessera__V1__OptimizerConfig msg;
    Tessera__V1__LearningRateSchedule lr;
    Tessera__V1__LearningRateSchedule__Constant constant;
    Tessera__V1__OptimizerConfig__Sgd sgd;
    Tessera__V1__OptimizerConfig__Adam adam;
} opt_desc_t;

/* A push of one dense gradient with full control over the TensorRef, for hostile cases. */
typedef struct push_spec {
    const char *job, *var;
    int shard;
    int dtype;
    int64_t shape[2];
    size_t rank;
    uint64_t offset, byte_length, chunk_offset;
    const void *payload;
    size_t payload_len;
    bool pull_after;
    uint32_t batches; /* PushRequest.batches */
} push_spec_t;

/* Shard `shard` of `num` of a [d0, d1] (d1 = 0: [d0]) float32 variable in the div layout,
 * initialized to `value` (glorot_seed = 0) or Glorot uniform with that seed. */
void ps_var_desc(var_desc_t *d, const char *name, int64_t d0, int64_t d1, int shard, int num,
                 double value, uint64_t glorot_seed);

void ps_opt_desc(opt_desc_t *o, bool adam, double lr);

/* CreateVariables for vars[0..n) of job, with opt (may be NULL). */
status_t ps_create(rpc_channel_t *ch, const char *job, opt_desc_t *opt, var_desc_t *vars, size_t n,
                   int *ret_created, rpc_error_t *err);

void ps_tensor_ref(Tessera__V1__TensorRef *t, int dtype, int64_t *shape, size_t rank,
                   uint64_t offset, uint64_t bytes);

/* Pulls a whole shard (rows == NULL) or rows of it; returns the malloc'd values. Fails the test
 * when the pull fails. */
float *ps_pull(rpc_channel_t *ch, const char *job, const char *var, int shard, const int64_t *rows,
               size_t n_rows, size_t *ret_n, uint64_t *ret_version);

status_t ps_push_raw(rpc_channel_t *ch, const push_spec_t *p, rpc_error_t *err);

/* A well-formed dense push of a [d0, d1] gradient. */
push_spec_t ps_dense(const char *job, const char *var, int shard, int64_t d0, int64_t d1,
                     const float *g);

/* Pushes rows of a [*, d1] variable: indices then values in the payload. */
status_t ps_push_rows(rpc_channel_t *ch, const char *job, const char *var, const int64_t *rows,
                      size_t n, const float *values, int64_t d1, bool pull_after,
                      float **ret_values, rpc_error_t *err);

/* Bit-exact float comparison, naming the first element that differs. */
void assert_floats_eq(const float *got, const float *want, size_t n);

#endif
