/* Initializers on the wire (proto/tessera/v1/ps.proto Initializer) and back. */
#ifndef TESSERA_RPC_INITIALIZER_PROTO_H
#define TESSERA_RPC_INITIALIZER_PROTO_H

#include "base/status.h"
#include "job/job.h"
#include "tessera/v1/ps.pb-c.h"

/* Converts the wire form (proto/tessera/v1/ps.proto Initializer) into *ret_init; NULL or no
 * kind set gives JOB_INIT_DEFAULT, the caller's default. A non-zero Initializer.seed is the
 * initializer's own seed (has_seed, as `seed:` in a job file); 0 leaves has_seed false and the
 * caller picks the stream seed. The fans of GlorotUniform, GlorotNormal, HeUniform and HeNormal go
 * to *ret_fan_in and *ret_fan_out (0 when the sender left them 0: compute them with
 * initializer_fans from the whole variable's shape); other kinds set both to 0. Non-finite values,
 * a negative fan or stddev, minval > maxval, or values beyond float32 (initializer_check) fail with
 * STATUS_INVALID_ARGUMENT naming the field;
 * the outputs are then untouched. */
status_t initializer_from_proto(const Tessera__V1__Initializer *p, job_init_t *ret_init,
                                double *ret_fan_in, double *ret_fan_out, status_msg_t *err);

/* The wire form of an initializer, with storage for the sub-message of its kind. */
typedef struct initializer_msg {
    Tessera__V1__Initializer msg;
    union {
        Tessera__V1__Initializer__Zeros zeros;
        Tessera__V1__Initializer__Ones ones;
        Tessera__V1__Initializer__Constant constant;
        Tessera__V1__Initializer__GlorotUniform glorot_uniform;
        Tessera__V1__Initializer__GlorotNormal glorot_normal;
        Tessera__V1__Initializer__HeUniform he_uniform;
        Tessera__V1__Initializer__HeNormal he_normal;
        Tessera__V1__Initializer__RandomUniform random_uniform;
        Tessera__V1__Initializer__RandomNormal random_normal;
    } sub;
} initializer_msg_t;

/* The inverse of initializer_from_proto: init (NULL or JOB_INIT_DEFAULT: dflt with Keras's
 * default parameters) into ret->msg. Fans are left 0, so the receiver computes them from the whole
 * variable's shape with initializer_fans; a seed of init's own travels as Initializer.seed.
 * ret->msg points into ret: keep ret alive while the message is used. */
void initializer_to_proto(const job_init_t *init, job_init_kind_t dflt, initializer_msg_t *ret);

/* A weight constraint on the wire (ps.proto Constraint) and back. constraint_from_proto takes a
 * variable of `rank` dimensions: NULL gives none; an unknown kind, an axis past the rank, or
 * values job_constraint_valid refuses fail with STATUS_INVALID_ARGUMENT naming the field. */
status_t constraint_from_proto(const Tessera__V1__Constraint *p, int rank, job_constraint_t *ret,
                               status_msg_t *err);
/* c (none: NULL) into *msg, which is returned. */
Tessera__V1__Constraint *constraint_to_proto(const job_constraint_t *c,
                                             Tessera__V1__Constraint *msg);
/* Whether c's norm spans dimension 0 (rows): its variable is updated whole. */
bool constraint_spans_rows(const job_constraint_t *c);

#endif
