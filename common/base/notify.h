/* systemd service notification (sd_notify). Every call is a no-op returning false when
 * $NOTIFY_SOCKET is unset, as under Kubernetes or a shell. Call from the main process. */
#ifndef TESSERA_NOTIFY_H
#define TESSERA_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* READY=1 with a STATUS line and Tessera's own X_TESSERA_LISTEN / X_TESSERA_METRICS keys, which
 * tell a supervisor (tessera run --local, the test harness) the ports a daemon picked. */
bool notify_ready(const char *status, const char *listen, const char *metrics_listen);

/* STATUS=<one line>. */
bool notify_status(const char *status);

/* STOPPING=1, sent on SIGTERM before draining. */
bool notify_stopping(void);

/* WATCHDOG=1. */
bool notify_watchdog(void);

/* The watchdog interval systemd expects pings within, in microseconds; 0 when off. */
uint64_t notify_watchdog_usec(void);

#endif
