#include "base/notify.h"

#include <stdio.h>

#include <systemd/sd-daemon.h>

#include "base/log.h"

static bool send_state(const char *state)
{
    int r = sd_notify(0, state);
    if (r < 0)
        LOG_WARNING(MAIN, "sd_notify failed: %d", r);
    return r > 0;
}

bool notify_ready(const char *status, const char *listen, const char *metrics_listen)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "READY=1\nSTATUS=%s\nX_TESSERA_LISTEN=%s\nX_TESSERA_METRICS=%s",
             status, listen, metrics_listen);
    return send_state(buf);
}

bool notify_status(const char *status)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "STATUS=%s", status);
    return send_state(buf);
}

bool notify_stopping(void)
{
    return send_state("STOPPING=1\nSTATUS=stopping");
}

bool notify_watchdog(void)
{
    return send_state("WATCHDOG=1");
}

uint64_t notify_watchdog_usec(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec;
}
