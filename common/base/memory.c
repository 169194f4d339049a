#include "base/memory.h"

#include <unistd.h>

uint64_t memory_physical_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

uint64_t memory_left(uint64_t limit, uint64_t used)
{
    return used < limit ? limit - used : 1;
}
