/* CRC-32C (Castagnoli), as TFRecord, ext4 and iSCSI use it; not zlib's CRC-32. */
#ifndef TESSERA_CRC32C_H
#define TESSERA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over len bytes. Uses the SSE4.2 instruction when the CPU has it. */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t len);

static inline uint32_t crc32c(const void *data, size_t len)
{
    return crc32c_extend(0, data, len);
}

/* TFRecord's mask and unmask. */
static inline uint32_t crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t crc32c_unmask(uint32_t masked)
{
    uint32_t r = masked - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}

#endif
