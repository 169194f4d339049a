#define _POSIX_C_SOURCE 200809L
#include "daemon/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/log.h"

/* Label pairs per metric; more is certainly a mistake (and unbounded label sets hurt the
 * Prometheus server far more than they cost here). */
#define MAX_LABELS 16

static const double default_bounds[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } kind_t;

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

/* One name+label set. Everything but the atomics is written once under the registry lock before
 * the pointer is published, and never changes afterwards. */
struct metric {
    struct family *family;
    struct metric *next; /* the family's next label set, in registration order */
    char *labels;        /* `a="x",b="y"` sorted by name and escaped; "" without labels */
    /* Counter or gauge value; histogram sum. A double's bit pattern, so that it can be updated
     * with compare-and-swap. */
    _Atomic uint64_t bits;
    double (*fn)(void *arg); /* value computed at scrape time; updates are then ignored */
    void *arg;
    size_t n_bounds;
    double *bounds;
    _Atomic uint64_t *buckets; /* n_bounds + 1 per-bucket (not cumulative) counts; last: +Inf */
};

struct family {
    struct family *next;
    char *name;
    char *help; /* escaped */
    kind_t kind;
    struct metric *first, *last;
};

struct metrics {
    pthread_mutex_t lock; /* guards the lists, not the values */
    struct family *first, *last;
};

/* ---- growable text buffer ---------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed; later writes are dropped */
};

static bool buf_reserve(struct buf *b, size_t extra)
{
    size_t cap;
    char *p;

    if (b->failed)
        return false;
    if (b->cap - b->len > extra)
        return true;
    cap = b->cap ? b->cap : 1024;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2)
            goto fail;
        cap *= 2;
    }
    p = realloc(b->p, cap);
    if (p == NULL)
        goto fail;
    b->p = p;
    b->cap = cap;
    return true;
fail:
    b->failed = true;
    return false;
}

static void buf_put(struct buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Appends s with backslash and newline escaped, and double quotes too when `quote` (label
 * values; HELP text keeps its quotes). */
static void buf_escape(struct buf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            buf_puts(b, "\\\\");
        else if (*s == '\n')
            buf_puts(b, "\\n");
        else if (*s == '"' && quote)
            buf_puts(b, "\\\"");
        else
            buf_put(b, s, 1);
    }
}

/* Takes the buffer's string, "" when nothing was written; NULL when an allocation failed. */
static char *buf_take(struct buf *b)
{
    if (!buf_reserve(b, 0)) {
        free(b->p);
        return NULL;
    }
    b->p[b->len] = '\0';
    return b->p;
}

/* ---- numbers ----------------------------------------------------------------------------- */

static double bits_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static uint64_t double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static void atomic_add_double(_Atomic uint64_t *p, double v)
{
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);

    while (!atomic_compare_exchange_weak_explicit(p, &old, double_bits(bits_double(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

/* Formats v as Go's strconv.FormatFloat(v, 'g', -1, 64) does, which is what the Go client
 * writes: the fewest digits that read back as v, in exponent form when the decimal exponent is
 * below -4 or at least 6; NaN, +Inf and -Inf spelled the Prometheus way. */
static void format_double(double v, char out[32])
{
    char e[32];
    int prec, exp;

    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    exp = (int)strtol(strchr(e, 'e') + 1, NULL, 10);
    if (exp < -4 || exp >= 6)
        memcpy(out, e, sizeof(e));
    else
        snprintf(out, 32, "%.*f", prec > exp ? prec - exp : 0, v);
    /* A locale with a decimal comma must not leak into the exposition. */
    for (char *c = out; *c != '\0'; c++)
        if (*c == ',')
            *c = '.';
}

/* ---- validation -------------------------------------------------------------------------- */

static bool is_alpha_(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Metric names as exporters may write them: [a-zA-Z_][a-zA-Z0-9_]* (colons are reserved for
 * recording rules). Label names share the pattern. */
static bool name_valid(const char *s)
{
    if (!is_alpha_(*s))
        return false;
    for (s++; *s != '\0'; s++)
        if (!is_alpha_(*s) && !is_digit(*s))
            return false;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Prometheus rejects the whole scrape on a label value that is not UTF-8. */
static bool utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;

    while (*s != '\0') {
        uint32_t cp;
        int n;
        if (*s < 0x80) {
            s++;
            continue;
        } else if ((*s & 0xe0) == 0xc0) {
            cp = *s & 0x1fu, n = 1;
        } else if ((*s & 0xf0) == 0xe0) {
            cp = *s & 0x0fu, n = 2;
        } else if ((*s & 0xf8) == 0xf0) {
            cp = *s & 0x07u, n = 3;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3fu);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* Checks the NULL-terminated name/value list and renders it sorted by label name, escaped, into
 * *ret_labels (malloc'd). Returns a reason on failure, NULL on success (*ret_labels may then be
 * NULL on allocation failure). */
static const char *labels_render(const char *const *labels, kind_t kind, char **ret_labels)
{
    const char *const *pair[MAX_LABELS];
    size_t n = 0;
    struct buf b = {0};

    *ret_labels = NULL;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        if (labels[i + 1] == NULL)
            return "a label name has no value (the list is name/value pairs ending in NULL)";
        if (!name_valid(labels[i]))
            return "a label name does not match [a-zA-Z_][a-zA-Z0-9_]*";
        if (strncmp(labels[i], "__", 2) == 0)
            return "label names starting with __ are reserved";
        if (kind == KIND_HISTOGRAM && strcmp(labels[i], "le") == 0)
            return "a histogram may not have a label named le";
        if (!utf8_valid(labels[i + 1]))
            return "a label value is not valid UTF-8";
        if (n == MAX_LABELS)
            return "too many labels";
        /* Insertion sort: the list is short, and sorting makes equal sets compare equal. */
        size_t j = n++;
        for (; j > 0 && strcmp(pair[j - 1][0], labels[i]) >= 0; j--) {
            if (strcmp(pair[j - 1][0], labels[i]) == 0)
                return "a label name appears twice";
            pair[j] = pair[j - 1];
        }
        pair[j] = &labels[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            buf_puts(&b, ",");
        buf_puts(&b, pair[i][0]);
        buf_puts(&b, "=\"");
        buf_escape(&b, pair[i][1], true);
        buf_puts(&b, "\"");
    }
    *ret_labels = buf_take(&b);
    return NULL;
}

/* Checks a histogram's upper bounds and copies them into *ret (malloc'd). A trailing +Inf is
 * implied, so one given is dropped. */
static const char *bounds_copy(const double *bounds, size_t n, double **ret, size_t *ret_n)
{
    if (bounds == NULL) {
        bounds = default_bounds;
        n = sizeof(default_bounds) / sizeof(default_bounds[0]);
    }
    if (n > 0 && isinf(bounds[n - 1]) && bounds[n - 1] > 0)
        n--;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(bounds[i]))
            return "histogram bounds must be finite";
        if (i > 0 && !(bounds[i] > bounds[i - 1]))
            return "histogram bounds must be strictly increasing";
    }
    *ret_n = n;
    *ret = malloc((n ? n : 1) * sizeof(double));
    if (*ret != NULL && n > 0)
        memcpy(*ret, bounds, n * sizeof(double));
    return NULL;
}

/* True when histogram family `hist` would write sample names that `name` also uses. */
static bool histogram_clash(const char *hist, const char *name)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    size_t n = strlen(hist);

    if (strncmp(name, hist, n) != 0)
        return false;
    for (size_t i = 0; i < 3; i++)
        if (strcmp(name + n, suffixes[i]) == 0)
            return true;
    return false;
}

static const char *name_check(const char *name, kind_t kind)
{
    if (!name_valid(name))
        return "the name does not match [a-zA-Z_][a-zA-Z0-9_]*";
    if (kind == KIND_COUNTER && !ends_with(name, "_total"))
        return "a counter's name must end in _total";
    if (kind != KIND_COUNTER && ends_with(name, "_total"))
        return "only counters' names end in _total";
    return NULL;
}

/* ---- registry ---------------------------------------------------------------------------- */

static void metric_free(struct metric *mt)
{
    free(mt->labels);
    free(mt->bounds);
    free((void *)mt->buckets);
    free(mt);
}

/* Finds the family called `name` (NULL when none); with the lock held. Sets *ret_reason when
 * the name cannot be used for a family of this kind and help. */
static struct family *family_find(metrics_t *m, const char *name, kind_t kind, const char *help,
                                  const char **ret_reason)
{
    *ret_reason = NULL;
    for (struct family *f = m->first; f != NULL; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            if (f->kind != kind)
                *ret_reason = "the name is registered with another type";
            else if (strcmp(f->help, help) != 0)
                *ret_reason = "the name is registered with another help text";
            return f;
        }
        if ((f->kind == KIND_HISTOGRAM && histogram_clash(f->name, name)) ||
            (kind == KIND_HISTOGRAM && histogram_clash(name, f->name)))
            *ret_reason = "the name clashes with a histogram's _bucket, _sum or _count";
    }
    return NULL;
}

/* Adds mt to the family `name`, creating it; with the lock held. */
static const char *family_add(metrics_t *m, const char *name, kind_t kind, const char *help,
                              struct metric *mt)
{
    struct family *f;
    const char *reason;

    f = family_find(m, name, kind, help, &reason);
    if (reason != NULL)
        return reason;
    if (f == NULL) {
        f = calloc(1, sizeof(*f));
        if (f == NULL || (f->name = strdup(name)) == NULL || (f->help = strdup(help)) == NULL) {
            if (f != NULL)
                free(f->name);
            free(f);
            return "out of memory";
        }
        f->kind = kind;
        if (m->last != NULL)
            m->last->next = f;
        else
            m->first = f;
        m->last = f;
    }
    for (struct metric *o = f->first; o != NULL; o = o->next)
        if (strcmp(o->labels, mt->labels) == 0)
            return "the same name and labels are registered already";
    mt->family = f;
    if (f->last != NULL)
        f->last->next = mt;
    else
        f->first = mt;
    f->last = mt;
    return NULL;
}

/* Builds the metric outside the lock, then links it in. */
static metric_t *metric_register(metrics_t *m, kind_t kind, const char *name, const char *help,
                                 const char *const *labels, const double *bounds, size_t n_bounds,
                                 double (*fn)(void *), void *arg)
{
    struct metric *mt = NULL;
    struct buf hb = {0};
    char *help_esc = NULL;
    const char *reason;

    if (m == NULL)
        return NULL;
    if (name == NULL) {
        LOG_WARNING(METRICS, "metric rejected: the name is NULL");
        return NULL;
    }
    reason = name_check(name, kind);
    if (reason == NULL && help != NULL && !utf8_valid(help))
        reason = "the help text is not valid UTF-8";
    if (reason != NULL)
        goto fail;
    reason = "out of memory";
    mt = calloc(1, sizeof(*mt));
    if (mt == NULL)
        goto fail;
    atomic_init(&mt->bits, double_bits(0.0));
    mt->fn = fn;
    mt->arg = arg;
    reason = labels_render(labels, kind, &mt->labels);
    if (reason == NULL && mt->labels == NULL)
        reason = "out of memory";
    if (reason == NULL && kind == KIND_HISTOGRAM) {
        reason = bounds_copy(bounds, n_bounds, &mt->bounds, &mt->n_bounds);
        if (reason == NULL && mt->bounds == NULL)
            reason = "out of memory";
        if (reason == NULL &&
            (mt->buckets = malloc((mt->n_bounds + 1) * sizeof(*mt->buckets))) == NULL)
            reason = "out of memory";
        for (size_t i = 0; reason == NULL && i <= mt->n_bounds; i++)
            atomic_init(&mt->buckets[i], 0);
    }
    buf_escape(&hb, help != NULL ? help : "", false);
    help_esc = buf_take(&hb);
    if (reason == NULL && help_esc == NULL)
        reason = "out of memory";
    if (reason != NULL)
        goto fail;
    pthread_mutex_lock(&m->lock);
    reason = family_add(m, name, kind, help_esc, mt);
    pthread_mutex_unlock(&m->lock);
    if (reason != NULL)
        goto fail;
    free(help_esc);
    return mt;
fail:
    LOG_WARNING(METRICS, "metric '%s' rejected: %s", name, reason);
    free(help_esc);
    if (mt != NULL)
        metric_free(mt);
    return NULL;
}

metric_t *metrics_counter(metrics_t *m, const char *name, const char *help,
                          const char *const *labels)
{
    return metric_register(m, KIND_COUNTER, name, help, labels, NULL, 0, NULL, NULL);
}

metric_t *metrics_gauge(metrics_t *m, const char *name, const char *help, const char *const *labels)
{
    return metric_register(m, KIND_GAUGE, name, help, labels, NULL, 0, NULL, NULL);
}

metric_t *metrics_histogram(metrics_t *m, const char *name, const char *help,
                            const char *const *labels, const double *bounds, size_t n_bounds)
{
    return metric_register(m, KIND_HISTOGRAM, name, help, labels, bounds, n_bounds, NULL, NULL);
}

metric_t *metrics_gauge_fn(metrics_t *m, const char *name, const char *help,
                           const char *const *labels, double (*fn)(void *arg), void *arg)
{
    if (fn == NULL) {
        LOG_WARNING(METRICS, "metric '%s' rejected: no function to compute it",
                    name != NULL ? name : "(null)");
        return NULL;
    }
    return metric_register(m, KIND_GAUGE, name, help, labels, NULL, 0, fn, arg);
}

metric_t *metrics_counter_fn(metrics_t *m, const char *name, const char *help,
                             const char *const *labels, double (*fn)(void *arg), void *arg)
{
    if (fn == NULL) {
        LOG_WARNING(METRICS, "metric '%s' rejected: no function to compute it",
                    name != NULL ? name : "(null)");
        return NULL;
    }
    return metric_register(m, KIND_COUNTER, name, help, labels, NULL, 0, fn, arg);
}

/* ---- updates ----------------------------------------------------------------------------- */

/* Counters only go up: a negative or NaN increment is ignored, as is any update to a computed
 * metric or a histogram. */
void metric_add(metric_t *c, double v)
{
    if (c == NULL || c->fn != NULL || c->family->kind == KIND_HISTOGRAM)
        return;
    if (c->family->kind == KIND_COUNTER && !(v >= 0))
        return;
    atomic_add_double(&c->bits, v);
}

void metric_inc(metric_t *c)
{
    metric_add(c, 1.0);
}

void metric_set(metric_t *g, double v)
{
    if (g == NULL || g->fn != NULL || g->family->kind != KIND_GAUGE)
        return;
    atomic_store_explicit(&g->bits, double_bits(v), memory_order_relaxed);
}

/* Counts v in the first bucket whose upper bound is >= v (NaN lands in +Inf), then adds it to the
 * sum. */
void metric_observe(metric_t *h, double v)
{
    size_t lo = 0, hi;

    if (h == NULL || h->family->kind != KIND_HISTOGRAM)
        return;
    hi = h->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    atomic_fetch_add_explicit(&h->buckets[lo], 1, memory_order_relaxed);
    atomic_add_double(&h->bits, v);
}

/* Counters and gauges: the value (computed ones call their function); histograms: the number of
 * observations; NULL: 0. */
double metric_value(const metric_t *c)
{
    uint64_t count = 0;

    if (c == NULL)
        return 0.0;
    if (c->fn != NULL)
        return c->fn(c->arg);
    if (c->family->kind != KIND_HISTOGRAM)
        return bits_double(atomic_load_explicit(&c->bits, memory_order_relaxed));
    for (size_t i = 0; i <= c->n_bounds; i++)
        count += atomic_load_explicit(&c->buckets[i], memory_order_relaxed);
    return (double)count;
}

/* ---- exposition -------------------------------------------------------------------------- */

/* Writes `name<suffix>{labels[,le="le"]} value`. */
static void put_sample(struct buf *b, const struct metric *mt, const char *suffix, const char *le,
                       const char *value)
{
    buf_puts(b, mt->family->name);
    buf_puts(b, suffix);
    if (*mt->labels != '\0' || le != NULL) {
        buf_puts(b, "{");
        buf_puts(b, mt->labels);
        if (le != NULL) {
            buf_puts(b, *mt->labels != '\0' ? ",le=\"" : "le=\"");
            buf_puts(b, le);
            buf_puts(b, "\"");
        }
        buf_puts(b, "}");
    }
    buf_puts(b, " ");
    buf_puts(b, value);
    buf_puts(b, "\n");
}

/* The count is the sum of the buckets as read, so +Inf always equals _count even when an
 * observation races the scrape. */
static void put_histogram(struct buf *b, const struct metric *mt)
{
    uint64_t cum = 0;
    char le[32], value[32];

    for (size_t i = 0; i <= mt->n_bounds; i++) {
        cum += atomic_load_explicit(&mt->buckets[i], memory_order_relaxed);
        if (i < mt->n_bounds)
            format_double(mt->bounds[i], le);
        else
            strcpy(le, "+Inf");
        snprintf(value, sizeof(value), "%" PRIu64, cum);
        put_sample(b, mt, "_bucket", le, value);
    }
    format_double(bits_double(atomic_load_explicit(&mt->bits, memory_order_relaxed)), value);
    put_sample(b, mt, "_sum", NULL, value);
    snprintf(value, sizeof(value), "%" PRIu64, cum);
    put_sample(b, mt, "_count", NULL, value);
}

static void put_family(struct buf *b, const struct family *f)
{
    char value[32];

    if (*f->help != '\0') {
        buf_puts(b, "# HELP ");
        buf_puts(b, f->name);
        buf_puts(b, " ");
        buf_puts(b, f->help);
        buf_puts(b, "\n");
    }
    buf_puts(b, "# TYPE ");
    buf_puts(b, f->name);
    buf_puts(b, " ");
    buf_puts(b, kind_names[f->kind]);
    buf_puts(b, "\n");
    for (const struct metric *mt = f->first; mt != NULL; mt = mt->next) {
        if (f->kind == KIND_HISTOGRAM) {
            put_histogram(b, mt);
        } else {
            format_double(metric_value(mt), value);
            put_sample(b, mt, "", NULL, value);
        }
    }
}

/* Holds the registry lock while computed metrics run, so their functions must not register
 * metrics. Fails with STATUS_NO_MEMORY or STATUS_INVALID_ARGUMENT (NULL arguments). */
status_t metrics_render(metrics_t *m, char **ret_text, size_t *ret_len)
{
    struct buf b = {0};
    char *text;

    if (m == NULL || ret_text == NULL)
        return STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&m->lock);
    for (const struct family *f = m->first; f != NULL; f = f->next)
        put_family(&b, f);
    pthread_mutex_unlock(&m->lock);
    text = buf_take(&b);
    if (text == NULL)
        return STATUS_NO_MEMORY;
    *ret_text = text;
    if (ret_len != NULL)
        *ret_len = b.len;
    return STATUS_OK;
}

/* ---- process metrics --------------------------------------------------------------------- */

/* Fields of /proc/self/stat, numbered as in proc(5). */
enum { STAT_UTIME = 14, STAT_STIME = 15, STAT_STARTTIME = 22, STAT_VSIZE = 23, STAT_RSS = 24 };

/* Reads /proc/self/stat fields 4..STAT_RSS into f[] (indexed by field number). */
static bool proc_self_stat(unsigned long long f[STAT_RSS + 1])
{
    char buf[2048], *p, *end;
    ssize_t n;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* The command name (field 2) is in parentheses and may itself contain spaces and ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0')
        return false;
    p += 3; /* at field 3, the state letter */
    p += strcspn(p, " ");
    for (int i = 4; i <= STAT_RSS; i++) {
        errno = 0;
        f[i] = strtoull(p, &end, 10);
        if (end == p || errno != 0)
            return false;
        p = end;
    }
    return true;
}

static double process_cpu_seconds(void *arg)
{
    unsigned long long f[STAT_RSS + 1];
    long tck = sysconf(_SC_CLK_TCK);

    (void)arg;
    if (!proc_self_stat(f) || tck <= 0)
        return NAN;
    return (double)(f[STAT_UTIME] + f[STAT_STIME]) / (double)tck;
}

static double process_resident_bytes(void *arg)
{
    unsigned long long f[STAT_RSS + 1];
    long page = sysconf(_SC_PAGESIZE);

    (void)arg;
    if (!proc_self_stat(f) || page <= 0)
        return NAN;
    return (double)f[STAT_RSS] * (double)page;
}

static double process_virtual_bytes(void *arg)
{
    unsigned long long f[STAT_RSS + 1];

    (void)arg;
    return proc_self_stat(f) ? (double)f[STAT_VSIZE] : NAN;
}

/* The boot time from the btime line of /proc/stat, in seconds since the epoch. */
static bool boot_time(unsigned long long *ret)
{
    char *line = NULL, *end;
    size_t cap = 0;
    bool found = false;
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    FILE *fp = fd >= 0 ? fdopen(fd, "r") : NULL;

    if (fp == NULL) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    while (!found && getline(&line, &cap, fp) > 0) {
        if (strncmp(line, "btime ", 6) != 0)
            continue;
        errno = 0;
        *ret = strtoull(line + 6, &end, 10);
        found = end != line + 6 && errno == 0;
        break;
    }
    free(line);
    fclose(fp);
    return found;
}

static double process_start_time(void *arg)
{
    unsigned long long f[STAT_RSS + 1], btime;
    long tck = sysconf(_SC_CLK_TCK);

    (void)arg;
    if (!proc_self_stat(f) || !boot_time(&btime) || tck <= 0)
        return NAN;
    return (double)btime + (double)f[STAT_STARTTIME] / (double)tck;
}

/* Counts the entries of /proc/self/fd, the directory's own descriptor included. */
static double process_open_fds(void *arg)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    double n = 0;

    (void)arg;
    if (d == NULL)
        return NAN;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static double process_max_fds(void *arg)
{
    struct rlimit rl;

    (void)arg;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return NAN;
    return rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur;
}

static bool register_process_metrics(metrics_t *m)
{
    return metric_register(m, KIND_COUNTER, "process_cpu_seconds_total",
                           "Total user and system CPU time spent in seconds.", NULL, NULL, 0,
                           process_cpu_seconds, NULL) != NULL &&
           metrics_gauge_fn(m, "process_resident_memory_bytes", "Resident memory size in bytes.",
                            NULL, process_resident_bytes, NULL) != NULL &&
           metrics_gauge_fn(m, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                            NULL, process_virtual_bytes, NULL) != NULL &&
           metrics_gauge_fn(m, "process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.", NULL,
                            process_start_time, NULL) != NULL &&
           metrics_gauge_fn(m, "process_open_fds", "Number of open file descriptors.", NULL,
                            process_open_fds, NULL) != NULL &&
           metrics_gauge_fn(m, "process_max_fds", "Maximum number of open file descriptors.", NULL,
                            process_max_fds, NULL) != NULL;
}

metrics_t *metrics_new(void)
{
    metrics_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }
    if (!register_process_metrics(m)) {
        metrics_free(m);
        return NULL;
    }
    return m;
}

/* Frees the registry and every metric in it; servers using it must be stopped first. */
void metrics_free(metrics_t *m)
{
    struct family *f, *fn;
    struct metric *mt, *mn;

    if (m == NULL)
        return;
    for (f = m->first; f != NULL; f = fn) {
        fn = f->next;
        for (mt = f->first; mt != NULL; mt = mn) {
            mn = mt->next;
            metric_free(mt);
        }
        free(f->name);
        free(f->help);
        free(f);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}
