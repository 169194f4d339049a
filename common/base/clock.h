/* The monotonic clock, the one every timeout, rate and duration in Tessera reads. */
#ifndef TESSERA_CLOCK_H
#define TESSERA_CLOCK_H

#include <stdint.h>

/* Nanoseconds, milliseconds and seconds since an arbitrary point (CLOCK_MONOTONIC). */
int64_t clock_now_ns(void);
int64_t clock_now_ms(void);
double clock_now_s(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME): timestamps people and files read, never for
 * measuring intervals. */
double clock_wall_s(void);

/* Sleeps ms milliseconds, the whole of them even when a signal interrupts. */
void clock_sleep_ms(int ms);

#endif
