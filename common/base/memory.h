/* What this machine holds. */
#ifndef TESSERA_MEMORY_H
#define TESSERA_MEMORY_H

#include <stdint.h>

/* Bytes of physical memory (sysconf); UINT64_MAX when the system does not say. The default
 * for the daemons' --max-memory-bytes and for `tessera train`. */
uint64_t memory_physical_bytes(void);

#endif
