/* What this machine holds. */
#ifndef TESSERA_MEMORY_H
#define TESSERA_MEMORY_H

#include <stdint.h>

/* Bytes of physical memory (sysconf); UINT64_MAX when the system does not say. The default
 * for the daemons' --max-memory-bytes and for `tessera train`. */
uint64_t memory_physical_bytes(void);

/* What is left of a limit once `used` bytes are taken; at least 1, because the loaders and
 * model_new read a limit of 0 as none. */
uint64_t memory_left(uint64_t limit, uint64_t used);

#endif
