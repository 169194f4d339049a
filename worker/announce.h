/* tessera-worker --chief ADDR: the worker announces itself to the chief
 * (Coordinator.RegisterWorker), which adds it to its cluster for the jobs that start after, so
 * that a cluster grows without restarting its chief. It announces at start and again every
 * ANNOUNCE_PERIOD_S: a chief restarted without this worker in its --worker list learns it again. */
#ifndef TESSERA_WORKER_ANNOUNCE_H
#define TESSERA_WORKER_ANNOUNCE_H

#include "base/status.h"

#define ANNOUNCE_PERIOD_S 5

typedef struct announcer announcer_t;

/* Starts announcing `address` (HOST:PORT where the chief reaches this worker) to `chief`. */
status_t announcer_start(const char *chief, const char *address, announcer_t **ret,
                         status_msg_t *err);

/* Stops and frees; NULL-safe. */
void announcer_stop(announcer_t *a);

/* The address to announce: `advertise` when given, else the listen address, its host replaced by
 * this machine's name when it listens on every interface. Writes into out. */
void announcer_address(const char *advertise, const char *listen, char *out, size_t len);

#endif
