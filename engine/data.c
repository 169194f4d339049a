/* The training data pipeline: IDX and synthetic sources read into memory, then shard, shuffle
 * buffer, batch, repeat and prefetch (see data.h).
 *
 * The producer (inline, or on the pipeline's thread when prefetch > 0) fills batch slots of a
 * ring; the consumer borrows one slot per data_pipeline_next() call and gives it back on the
 * next call. Filling a slot happens outside the lock, so the consumer never waits on a memcpy of
 * a batch it is not going to read. */
#include "data.h"
#include "data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Cap on one dataset's feature array (float32), so a corrupt header or a typo in a synthetic
 * spec fails with a message instead of an allocation of the whole machine. */
#define DATA_MAX_FEATURE_BYTES (UINT64_C(4) << 30)
/* Token ids are stored as float32, which holds integers exactly up to 2^24. */
#define DATA_MAX_VOCABULARY (1 << 24)
#define DATA_MAX_CLASSES    (1 << 20)
#define DATA_MAX_PREFETCH   64
#define IDX_TYPE_UINT8      0x08
#define IDX_READ_CHUNK      (1u << 20)

/* ---- random numbers: splitmix64 to seed, xoshiro256** to draw ------------------------------ */

typedef struct rng {
    uint64_t s[4];
} rng_t;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static void rng_seed(rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n > 0. The modulo bias is below n / 2^64: nothing a shuffle can show. */
static uint64_t rng_below(rng_t *r, uint64_t n)
{
    return rng_next(r) % n;
}

/* ---- datasets ---------------------------------------------------------------------------- */

void *data_alloc_aligned(size_t bytes)
{
    size_t align = bytes >= DATA_HUGE_BYTES ? DATA_HUGE_PAGE : DATA_ALIGN;
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded == 0 ? align : rounded);

    /* Huge pages: a 200 MB dataset filled in takes 50,000 page faults otherwise, which cost
     * the TFRecord reader half its time. Only advice: without THP nothing changes. */
    if (p != NULL && align == DATA_HUGE_PAGE)
        madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

/* A dataset_t with room for n examples of feature_len values, or NULL when out of memory. */
static dataset_t *dataset_alloc(size_t n, size_t feature_len)
{
    dataset_t *ds = calloc(1, sizeof(*ds));
    if (ds == NULL)
        return NULL;
    ds->n = n;
    ds->feature_len = feature_len;
    ds->label_len = 1;
    ds->features = data_alloc_aligned(n * feature_len * sizeof(float));
    ds->labels = data_alloc_aligned(n * sizeof(float));
    if (ds->features == NULL || ds->labels == NULL) {
        dataset_free(ds);
        return NULL;
    }
    return ds;
}

uint64_t data_bytes_elem(uint64_t n, uint64_t feature_len, uint64_t elem, uint64_t label_len)
{
    uint64_t row, labels, bytes;
    if (__builtin_mul_overflow(feature_len, elem, &row) ||
        __builtin_mul_overflow(label_len, sizeof(float), &labels) ||
        __builtin_add_overflow(row, labels, &row) || __builtin_mul_overflow(n, row, &bytes))
        return UINT64_MAX;
    return bytes;
}

uint64_t data_bytes_of(uint64_t n, uint64_t feature_len, uint64_t label_len)
{
    return data_bytes_elem(n, feature_len, sizeof(float), label_len);
}

/* Fails with RESOURCE_EXHAUSTED, naming `what`, when `bytes` pass max_bytes (0: no limit). */
status_t data_check_budget(const char *what, uint64_t bytes, uint64_t max_bytes, status_msg_t *err)
{
    if (max_bytes > 0 && bytes > max_bytes)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "%s: %llu bytes pass the memory limit of %llu bytes", what,
                           (unsigned long long)bytes, (unsigned long long)max_bytes);
    return STATUS_OK;
}

size_t dataset_bytes(const dataset_t *ds)
{
    return ds == NULL
               ? 0
               : (size_t)data_bytes_elem(ds->n, ds->feature_len,
                                         ds->bytes != NULL ? 1 : sizeof(float), ds->label_len);
}

void dataset_set_byte_scale(dataset_t *ds, double scale)
{
    ds->byte_scale = scale;
}

/* Bytes to floats, each (float)(byte * scale) computed in double: the loop vectorizes (a table
 * lookup does not), the widest this CPU runs chosen at load time where the compiler can. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void
bytes_to_floats(const uint8_t *restrict row, double scale, float *restrict out, size_t len)
{
    for (size_t i = 0; i < len; i++)
        out[i] = (float)((double)row[i] * scale);
}

void dataset_row(const dataset_t *ds, size_t e, float *out)
{
    size_t len = ds->feature_len;

    if (ds->bytes == NULL) {
        memcpy(out, ds->features + e * len, len * sizeof(float));
        return;
    }
    bytes_to_floats(ds->bytes + e * len, ds->byte_scale, out, len);
}

void dataset_free(dataset_t *ds)
{
    if (ds == NULL)
        return;
    free(ds->features);
    free(ds->bytes);
    free(ds->labels);
    free(ds);
}

/* ---- IDX files --------------------------------------------------------------------------- */

typedef struct idx_file {
    const char *path;
    gzFile gz;
    int rank;
    uint32_t dims[255];
    uint64_t data_bytes; /* the product of dims: what the header promises */
    uint64_t read_bytes; /* data bytes read so far, for messages */
    uint64_t file_bytes; /* the file's size on disk */
} idx_file_t;

/* Deflate never expands more than 1032:1 (each 258-byte match costs at least two bits), so a
 * gzip file of n bytes holds at most this many times n: a header that claims more is a lie. */
#define GZIP_MAX_RATIO 1032u

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads up to len bytes into buf and sets *ret_got to how many. A stream that ends early is not
 * an error here (the short count tells the caller); a read or decode error is. */
static status_t gz_read_some(idx_file_t *f, void *buf, size_t len, size_t *ret_got,
                             status_msg_t *err)
{
    uint8_t *p = buf;
    size_t got = 0;
    status_t rc = STATUS_OK;

    while (got < len) {
        unsigned want = len - got > IDX_READ_CHUNK ? IDX_READ_CHUNK : (unsigned)(len - got);
        int n = gzread(f->gz, p + got, want);
        if (n < 0) {
            int zerr;
            const char *msg = gzerror(f->gz, &zerr);
            if (zerr == Z_BUF_ERROR) /* "unexpected end of file": a truncated gzip stream */
                break;
            if (zerr == Z_ERRNO)
                rc = status_fail(err, status_from_errno(errno), "%s: read failed: %s", f->path,
                                 strerror(errno));
            else
                rc = status_fail(err, STATUS_INVALID_ARGUMENT, "%s: corrupt gzip data: %s", f->path,
                                 msg);
            break;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    *ret_got = got;
    return rc;
}

static status_t idx_truncated(const idx_file_t *f, uint64_t held, status_msg_t *err)
{
    return status_fail(err, STATUS_INVALID_ARGUMENT,
                       "%s: truncated: the header promises %llu bytes of data but the file holds "
                       "%llu",
                       f->path, (unsigned long long)f->data_bytes, (unsigned long long)held);
}

/* Reads exactly len data bytes, or fails saying the file is truncated. */
static status_t idx_read_data(idx_file_t *f, void *buf, size_t len, status_msg_t *err)
{
    size_t got;

    STATUS_CHECK(gz_read_some(f, buf, len, &got, err));
    f->read_bytes += got;
    return got < len ? idx_truncated(f, f->read_bytes, err) : STATUS_OK;
}

/* After the data: no bytes may follow, and reading on makes zlib check the gzip trailer (CRC
 * and length), so a corrupt or cut-off trailer is caught too. */
static status_t idx_check_end(idx_file_t *f, status_msg_t *err)
{
    uint8_t extra;
    size_t got;
    int zerr = Z_OK;

    STATUS_CHECK(gz_read_some(f, &extra, 1, &got, err));
    if (got > 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: more data than the header's %llu bytes: wrong dimensions?", f->path,
                           (unsigned long long)f->data_bytes);
    gzerror(f->gz, &zerr);
    if (zerr == Z_BUF_ERROR)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: truncated: the gzip stream ends before its trailer", f->path);
    return STATUS_OK;
}

/* The header's dimensions against what the file can hold, before anything is allocated for
 * them: an uncompressed file must hold exactly the data it promises, a gzip file no more than
 * deflate's ratio allows. */
static status_t idx_check_claim(idx_file_t *f, status_msg_t *err)
{
    uint64_t header = 4 + 4 * (uint64_t)f->rank, room;

    if (gzdirect(f->gz)) {
        room = f->file_bytes > header ? f->file_bytes - header : 0;
        return f->data_bytes > room ? idx_truncated(f, room, err) : STATUS_OK;
    }
    if (f->data_bytes / GZIP_MAX_RATIO > f->file_bytes)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: the header promises %llu bytes of data, more than a gzip file of "
                           "%llu bytes can hold",
                           f->path, (unsigned long long)f->data_bytes,
                           (unsigned long long)f->file_bytes);
    return STATUS_OK;
}

/* Opens an IDX file and parses its header: magic (0, 0, type, rank) then rank big-endian
 * uint32 dimensions. Only uint8 data of rank 1..max_rank with nonzero dimensions is accepted. */
static status_t idx_open(idx_file_t *f, const char *path, int max_rank, status_msg_t *err)
{
    uint8_t head[4], dims[4 * 255];
    struct stat st = {0};
    size_t got;
    int fd;

    memset(f, 0, sizeof(*f));
    f->path = path;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return status_fail(err, status_from_errno(errno), "%s: cannot open: %s", path,
                           strerror(errno));
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        return status_fail(err, status_from_errno(saved), "%s: cannot stat: %s", path,
                           strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: not a regular file", path);
    }
    f->file_bytes = (uint64_t)st.st_size;
    f->gz = gzdopen(fd, "rb");
    if (f->gz == NULL) {
        close(fd);
        return status_fail(err, STATUS_NO_MEMORY, "%s: cannot start the gzip reader", path);
    }
    gzbuffer(f->gz, 256 * 1024);
    STATUS_CHECK(gz_read_some(f, head, sizeof(head), &got, err));
    if (got < sizeof(head))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: truncated: %zu bytes, shorter than an IDX header", path, got);
    if (head[0] != 0 || head[1] != 0 || head[3] == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: bad magic 0x%02x%02x%02x%02x: not an IDX file", path, head[0],
                           head[1], head[2], head[3]);
    if (head[2] != IDX_TYPE_UINT8)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: IDX data type 0x%02x is not supported (only uint8, 0x08)", path,
                           head[2]);
    f->rank = head[3];
    if (f->rank > max_rank)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: IDX rank %d, at most %d supported (examples + %d feature axes)",
                           path, f->rank, max_rank, max_rank - 1);
    STATUS_CHECK(gz_read_some(f, dims, 4 * (size_t)f->rank, &got, err));
    if (got < 4 * (size_t)f->rank)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: truncated: the header ends inside its %d dimensions", path,
                           f->rank);
    f->data_bytes = 1;
    for (int i = 0; i < f->rank; i++) {
        f->dims[i] = be32(dims + 4 * i);
        if (f->dims[i] == 0 || f->dims[i] > INT32_MAX)
            return status_fail(err, STATUS_OUT_OF_RANGE, "%s: dimension %d is %lu, not 1 to 2^31-1",
                               path, i, (unsigned long)f->dims[i]);
        /* Both factors are below 2^32 and the running product below the cap: no overflow. */
        f->data_bytes *= f->dims[i];
        if (f->data_bytes * sizeof(float) > DATA_MAX_FEATURE_BYTES)
            return status_fail(err, STATUS_OUT_OF_RANGE,
                               "%s: the header's dimensions make more than %llu GiB of floats",
                               path, (unsigned long long)(DATA_MAX_FEATURE_BYTES >> 30));
    }
    return idx_check_claim(f, err);
}

static void idx_close(idx_file_t *f)
{
    if (f->gz != NULL)
        gzclose(f->gz);
    f->gz = NULL;
}

/* Reads the pixels as they are (they become floats a batch at a time, dataset_row). */
static status_t idx_read_features(idx_file_t *f, uint8_t *out, status_msg_t *err)
{
    STATUS_CHECK(idx_read_data(f, out, (size_t)f->data_bytes, err));
    return idx_check_end(f, err);
}

/* Reads the labels as floats and sets ds->classes to the largest label + 1. */
static status_t idx_read_labels(idx_file_t *f, dataset_t *ds, status_msg_t *err)
{
    uint8_t *raw = malloc(ds->n);
    int max_label = 0;
    status_t rc;

    if (raw == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: no memory for %zu labels", f->path, ds->n);
    STATUS_CHECK_GOTO(idx_read_data(f, raw, ds->n, err), rc, out);
    STATUS_CHECK_GOTO(idx_check_end(f, err), rc, out);
    for (size_t i = 0; i < ds->n; i++) {
        ds->labels[i] = raw[i];
        if (raw[i] > max_label)
            max_label = raw[i];
    }
    ds->classes = max_label + 1;
out:
    free(raw);
    return rc;
}

status_t dataset_load_idx(const char *images, const char *labels, double scale, uint64_t max_bytes,
                          dataset_t **ret_ds, status_msg_t *err)
{
    idx_file_t fi, fl;
    dataset_t *ds = NULL;
    size_t feature_len = 1;
    status_t rc;

    if (images == NULL || labels == NULL || ret_ds == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "IDX source: images and labels required");
    if (!(fabs(scale) * 255.0 <= FLT_MAX))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: scale %g times a byte value overflows float32", images, scale);
    memset(&fl, 0, sizeof(fl));
    STATUS_CHECK_GOTO(idx_open(&fi, images, JOB_MAX_RANK + 1, err), rc, fail);
    /* The label header is checked before 47 MB of pixels are inflated. */
    STATUS_CHECK_GOTO(idx_open(&fl, labels, 255, err), rc, fail);
    if (fl.rank != 1) {
        rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                         "%s: a label file must have rank 1 (magic 0x00000801), this one has "
                         "rank %d",
                         labels, fl.rank);
        goto fail;
    }
    if (fl.dims[0] != fi.dims[0]) {
        rc = status_fail(err, STATUS_INVALID_ARGUMENT, "%s: %lu labels but %s has %lu images",
                         labels, (unsigned long)fl.dims[0], images, (unsigned long)fi.dims[0]);
        goto fail;
    }
    for (int i = 1; i < fi.rank; i++)
        feature_len *= fi.dims[i];
    STATUS_CHECK_GOTO(
        data_check_budget(images, data_bytes_elem(fi.dims[0], feature_len, 1, 1), max_bytes, err),
        rc, fail);
    ds = calloc(1, sizeof(*ds));
    if (ds != NULL) {
        ds->n = fi.dims[0];
        ds->feature_len = feature_len;
        ds->label_len = 1;
        ds->bytes = data_alloc_aligned(ds->n * feature_len);
        ds->labels = data_alloc_aligned(ds->n * sizeof(float));
    }
    if (ds == NULL || ds->bytes == NULL || ds->labels == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: no memory for %lu examples of %zu bytes",
                         images, (unsigned long)fi.dims[0], feature_len);
        goto fail;
    }
    dataset_set_byte_scale(ds, scale);
    /* A rank-1 file holds one value per example: shape [1]. */
    ds->rank = fi.rank > 1 ? fi.rank - 1 : 1;
    ds->shape[0] = 1;
    for (int i = 1; i < fi.rank; i++)
        ds->shape[i - 1] = (int)fi.dims[i];
    STATUS_CHECK_GOTO(idx_read_features(&fi, ds->bytes, err), rc, fail);
    STATUS_CHECK_GOTO(idx_read_labels(&fl, ds, err), rc, fail);
    idx_close(&fi);
    idx_close(&fl);
    *ret_ds = ds;
    return STATUS_OK;
fail:
    idx_close(&fi);
    idx_close(&fl);
    dataset_free(ds);
    return rc;
}

/* ---- synthetic data ---------------------------------------------------------------------- */

/* The teacher's seed is fixed, not spec->seed: a train and a test split generated with
 * different seeds then share one labelling rule, so evaluation measures what was learnt. */
#define SYNTHETIC_TEACHER_SEED UINT64_C(0x7e55e7a7eac4e125)

static status_t synthetic_check(const job_synthetic_t *spec, double scale, size_t *ret_len,
                                status_msg_t *err)
{
    uint64_t len = 1;

    if (spec->kind != JOB_SYNTHETIC_CLASSIFICATION && spec->kind != JOB_SYNTHETIC_TEXT)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "synthetic data: unknown kind %d",
                           (int)spec->kind);
    if (spec->examples <= 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "synthetic data: examples must be > 0, not %lld",
                           (long long)spec->examples);
    if (spec->rank < 1 || spec->rank > JOB_MAX_RANK)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "synthetic data: shape must have 1 to %d dimensions, not %d",
                           JOB_MAX_RANK, spec->rank);
    for (int i = 0; i < spec->rank; i++) {
        if (spec->shape[i] <= 0)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "synthetic data: shape[%d] must be > 0, not %d", i, spec->shape[i]);
        len *= (uint64_t)spec->shape[i];
        if (len * sizeof(float) > DATA_MAX_FEATURE_BYTES)
            break;
    }
    if (len * sizeof(float) > DATA_MAX_FEATURE_BYTES ||
        (uint64_t)spec->examples > DATA_MAX_FEATURE_BYTES / sizeof(float) / len)
        return status_fail(
            err, STATUS_OUT_OF_RANGE, "synthetic data: %lld examples of this shape exceed %llu GiB",
            (long long)spec->examples, (unsigned long long)(DATA_MAX_FEATURE_BYTES >> 30));
    if (spec->kind == JOB_SYNTHETIC_CLASSIFICATION &&
        (spec->classes < 2 || spec->classes > DATA_MAX_CLASSES ||
         len * (uint64_t)spec->classes * sizeof(float) > DATA_MAX_FEATURE_BYTES))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "synthetic data: classes must be 2 to %d (and the teacher, shape x "
                           "classes, under %llu GiB), not %d",
                           DATA_MAX_CLASSES, (unsigned long long)(DATA_MAX_FEATURE_BYTES >> 30),
                           spec->classes);
    if (spec->kind == JOB_SYNTHETIC_TEXT &&
        (spec->vocabulary < 2 || spec->vocabulary > DATA_MAX_VOCABULARY))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "synthetic data: vocabulary must be 2 to %d, not %d",
                           DATA_MAX_VOCABULARY, spec->vocabulary);
    if (!isfinite(scale))
        return status_fail(err, STATUS_INVALID_ARGUMENT, "synthetic data: scale %g is not finite",
                           scale);
    *ret_len = (size_t)len;
    return STATUS_OK;
}

/* Features uniform in [0, 1) times scale; the label is the argmax of (x - 0.5) W, W a fixed
 * uniform [-1, 1) teacher. Centring x keeps the classes roughly balanced. */
static status_t synthetic_classification(dataset_t *ds, int classes, uint64_t seed, double scale,
                                         status_msg_t *err)
{
    size_t len = ds->feature_len, c = (size_t)classes;
    float *w = malloc(len * c * sizeof(float));
    double *x = malloc(len * sizeof(double));
    double *logits = malloc(c * sizeof(double));
    rng_t teacher, data;
    status_t rc = STATUS_OK;

    if (w == NULL || x == NULL || logits == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "synthetic data: no memory for the teacher");
        goto out;
    }
    rng_seed(&teacher, SYNTHETIC_TEACHER_SEED);
    for (size_t i = 0; i < len * c; i++)
        w[i] = (float)(2 * rng_uniform(&teacher) - 1);
    rng_seed(&data, seed);
    for (size_t e = 0; e < ds->n; e++) {
        float *row = ds->features + e * len;
        size_t best = 0;
        for (size_t k = 0; k < len; k++) {
            x[k] = rng_uniform(&data);
            row[k] = (float)(x[k] * scale);
        }
        for (size_t j = 0; j < c; j++)
            logits[j] = 0;
        for (size_t k = 0; k < len; k++)
            for (size_t j = 0; j < c; j++)
                logits[j] += (x[k] - 0.5) * w[k * c + j];
        for (size_t j = 1; j < c; j++)
            if (logits[j] > logits[best])
                best = j;
        ds->labels[e] = (float)best;
    }
    ds->classes = classes;
out:
    free(w);
    free(x);
    free(logits);
    return rc;
}

/* Token ids uniform in [1, vocabulary); label 1 when the mean of fixed per-token weights,
 * uniform in [-1, 1), is positive. Ids are not scaled: an Embedding looks them up. */
static status_t synthetic_text(dataset_t *ds, int vocabulary, uint64_t seed, status_msg_t *err)
{
    size_t len = ds->feature_len;
    float *w = malloc((size_t)vocabulary * sizeof(float));
    rng_t teacher, data;

    if (w == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "synthetic data: no memory for %d weights",
                           vocabulary);
    rng_seed(&teacher, SYNTHETIC_TEACHER_SEED);
    for (int v = 0; v < vocabulary; v++)
        w[v] = (float)(2 * rng_uniform(&teacher) - 1);
    rng_seed(&data, seed);
    for (size_t e = 0; e < ds->n; e++) {
        float *row = ds->features + e * len;
        double sum = 0;
        for (size_t k = 0; k < len; k++) {
            uint64_t id = 1 + rng_below(&data, (uint64_t)vocabulary - 1);
            row[k] = (float)id;
            sum += w[id];
        }
        ds->labels[e] = sum > 0 ? 1.0f : 0.0f;
    }
    ds->classes = 2;
    free(w);
    return STATUS_OK;
}

status_t dataset_synthetic(const job_synthetic_t *spec, double scale, uint64_t max_bytes,
                           dataset_t **ret_ds, status_msg_t *err)
{
    dataset_t *ds;
    size_t len = 0;
    status_t rc;

    if (spec == NULL || ret_ds == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "synthetic data: no spec given");
    STATUS_CHECK(synthetic_check(spec, scale, &len, err));
    /* The data and, while it is generated, the teacher. */
    STATUS_CHECK(data_check_budget("synthetic data",
                                   data_bytes_of((uint64_t)spec->examples, len, 1) +
                                       (uint64_t)len * (uint64_t)spec->classes * sizeof(float),
                                   max_bytes, err));
    ds = dataset_alloc((size_t)spec->examples, len);
    if (ds == NULL)
        return status_fail(err, STATUS_NO_MEMORY,
                           "synthetic data: no memory for %lld examples of %zu floats",
                           (long long)spec->examples, len);
    ds->rank = spec->rank;
    for (int i = 0; i < spec->rank; i++)
        ds->shape[i] = spec->shape[i];
    if (spec->kind == JOB_SYNTHETIC_CLASSIFICATION)
        rc = synthetic_classification(ds, spec->classes, spec->seed, scale, err);
    else
        rc = synthetic_text(ds, spec->vocabulary, spec->seed, err);
    if (rc != STATUS_OK) {
        dataset_free(ds);
        return rc;
    }
    *ret_ds = ds;
    return STATUS_OK;
}

status_t dataset_load_part(const job_source_t *src, double scale, uint64_t max_bytes,
                           const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                           status_msg_t *err)
{
    bool by_file = false;

    if (ret_by_file != NULL)
        *ret_by_file = false;
    if (src == NULL || !src->present)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "no data source given");
    switch (src->format) {
    case JOB_DATA_IDX:
        return dataset_load_idx(src->images, src->labels, scale, max_bytes, ret_ds, err);
    case JOB_DATA_SYNTHETIC:
        return dataset_synthetic(&src->synthetic, scale, max_bytes, ret_ds, err);
    case JOB_DATA_TFRECORD:
        return dataset_load_tfrecord(src, scale, max_bytes, part, ret_ds,
                                     ret_by_file ? ret_by_file : &by_file, err);
    case JOB_DATA_NPY:
    case JOB_DATA_NPZ:
        return dataset_load_numpy(src, scale, max_bytes, ret_ds, err);
    case JOB_DATA_CSV:
        return dataset_load_csv(src, scale, max_bytes, part, ret_ds,
                                ret_by_file ? ret_by_file : &by_file, err);
    }
    return status_fail(err, STATUS_INVALID_ARGUMENT, "unknown data format %d", (int)src->format);
}

status_t dataset_load(const job_source_t *src, double scale, uint64_t max_bytes, dataset_t **ret_ds,
                      status_msg_t *err)
{
    return dataset_load_part(src, scale, max_bytes, NULL, ret_ds, NULL, err);
}

/* ---- the pipeline ------------------------------------------------------------------------ */

typedef struct batch_slot {
    float *features; /* [rows, feature_len], 64-byte aligned */
    float *labels;
    int size;
    int64_t epoch, index;
    bool last_of_epoch;
} batch_slot_t;

struct data_pipeline {
    const dataset_t *ds;
    data_pipeline_opts_t opts;
    size_t *shard; /* dataset indices of this shard, in dataset order */
    size_t shard_n;
    size_t *order;   /* this epoch's order of shard */
    size_t *buffer;  /* the shuffle buffer */
    size_t buffer_n; /* its capacity: min(shuffle_buffer, shard_n) */
    int64_t batches_per_epoch;

    /* Producer state: touched by the producer only. */
    int64_t epoch; /* the epoch being produced */
    int64_t batch; /* the next batch's index within it */

    /* The ring, in order: the slot lent to the consumer (if held), filled slots from `read`,
     * then free slots from `write`. Guarded by lock, except each slot's contents, which belong
     * to whoever the indices give it to. */
    batch_slot_t *slots;
    int n_slots;
    int read, write, filled;
    bool held, producer_done, stop;
    bool threaded;
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    pthread_t thread;
};

/* Writes the epoch's order: the shard through a shuffle buffer seeded by (seed, epoch), the
 * way tf.data's shuffle does it: fill the buffer, then emit a random slot and refill it with
 * the next element; once the input is spent, drain the buffer at random. */
static void epoch_order(data_pipeline_t *p, int64_t epoch)
{
    size_t in = 0, live, out = 0;
    uint64_t epoch_key = (uint64_t)epoch ^ UINT64_C(0x5eed5eed5eed5eed);
    rng_t r;

    if (p->buffer_n <= 1) {
        memcpy(p->order, p->shard, p->shard_n * sizeof(size_t));
        return;
    }
    /* Seeded by (seed, epoch): every epoch differs, and a rerun repeats them all. */
    rng_seed(&r, p->opts.seed ^ splitmix64(&epoch_key));
    for (live = 0; live < p->buffer_n; live++)
        p->buffer[live] = p->shard[in++];
    while (live > 0) {
        size_t j = (size_t)rng_below(&r, live);
        p->order[out++] = p->buffer[j];
        if (in < p->shard_n)
            p->buffer[j] = p->shard[in++];
        else
            p->buffer[j] = p->buffer[--live];
    }
}

/* Fills slot with the next batch; false when all epochs are done. */
static bool produce(data_pipeline_t *p, batch_slot_t *slot)
{
    const dataset_t *ds = p->ds;
    size_t start, rows, len = ds->feature_len;

    if (p->batch == p->batches_per_epoch) {
        p->epoch++;
        p->batch = 0;
    }
    if (p->opts.epochs >= 0 && p->epoch >= p->opts.epochs)
        return false;
    if (p->batch == 0)
        epoch_order(p, p->epoch);
    start = (size_t)p->batch * (size_t)p->opts.batch_size;
    rows = p->shard_n - start;
    if (rows > (size_t)p->opts.batch_size)
        rows = (size_t)p->opts.batch_size;
    for (size_t i = 0; i < rows; i++) {
        size_t e = p->order[start + i];
        dataset_row(ds, e, slot->features + i * len);
        memcpy(slot->labels + i * ds->label_len, ds->labels + e * ds->label_len,
               ds->label_len * sizeof(float));
    }
    slot->size = (int)rows;
    slot->epoch = p->epoch;
    slot->index = p->batch;
    p->batch++;
    slot->last_of_epoch = p->batch == p->batches_per_epoch;
    return true;
}

static void *producer_main(void *arg)
{
    data_pipeline_t *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->filled + (int)p->held == p->n_slots)
            pthread_cond_wait(&p->not_full, &p->lock);
        if (p->stop)
            break;
        /* Slot `write` is free: neither filled nor lent, so it is ours without the lock. */
        batch_slot_t *slot = &p->slots[p->write];
        pthread_mutex_unlock(&p->lock);
        bool more = produce(p, slot);
        pthread_mutex_lock(&p->lock);
        if (!more)
            break;
        p->write = (p->write + 1) % p->n_slots;
        p->filled++;
        pthread_cond_signal(&p->not_empty);
    }
    p->producer_done = true;
    pthread_cond_broadcast(&p->not_empty);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void fill_batch(const batch_slot_t *slot, data_batch_t *ret_batch)
{
    ret_batch->features = slot->features;
    ret_batch->labels = slot->labels;
    ret_batch->size = slot->size;
    ret_batch->epoch = slot->epoch;
    ret_batch->index = slot->index;
    ret_batch->shard = 0;
    ret_batch->last_of_epoch = slot->last_of_epoch;
}

bool data_pipeline_next(data_pipeline_t *p, data_batch_t *ret_batch)
{
    batch_slot_t *slot;

    if (p == NULL || ret_batch == NULL)
        return false;
    if (!p->threaded) {
        if (p->producer_done || !produce(p, &p->slots[0])) {
            p->producer_done = true;
            return false;
        }
        fill_batch(&p->slots[0], ret_batch);
        return true;
    }
    pthread_mutex_lock(&p->lock);
    if (p->held) {
        p->held = false;
        pthread_cond_signal(&p->not_full);
    }
    while (p->filled == 0 && !p->producer_done)
        pthread_cond_wait(&p->not_empty, &p->lock);
    if (p->filled == 0) {
        pthread_mutex_unlock(&p->lock);
        return false;
    }
    slot = &p->slots[p->read];
    p->read = (p->read + 1) % p->n_slots;
    p->filled--;
    p->held = true;
    pthread_mutex_unlock(&p->lock);
    fill_batch(slot, ret_batch);
    return true;
}

size_t data_pipeline_examples(const data_pipeline_t *p)
{
    return p == NULL ? 0 : p->shard_n;
}

int64_t data_pipeline_batches_per_epoch(const data_pipeline_t *p)
{
    return p == NULL ? 0 : p->batches_per_epoch;
}

static status_t opts_check(const dataset_t *ds, const data_pipeline_opts_t *o, status_msg_t *err)
{
    if (o->batch_size < 1)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "batch_size must be >= 1, not %d",
                           o->batch_size);
    if (o->num_shards < 1 || o->shard_index < 0 || o->shard_index >= o->num_shards)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "shard %d of %d: need 0 <= shard index < number of shards",
                           o->shard_index, o->num_shards);
    if (o->shuffle_buffer < 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "shuffle_buffer must be >= 0, not %lld",
                           (long long)o->shuffle_buffer);
    if (o->epochs == 0 || o->epochs < -1)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "epochs must be > 0, or -1 to repeat forever, not %lld",
                           (long long)o->epochs);
    if (o->prefetch < 0 || o->prefetch > DATA_MAX_PREFETCH)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "prefetch must be 0 to %d, not %d",
                           DATA_MAX_PREFETCH, o->prefetch);
    if ((ds->features == NULL && ds->bytes == NULL) || ds->labels == NULL || ds->feature_len == 0 ||
        ds->label_len == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "the dataset is empty");
    return STATUS_OK;
}

/* The shard, its batch count and the ring's slots. */
static status_t pipeline_alloc(data_pipeline_t *p, status_msg_t *err)
{
    const data_pipeline_opts_t *o = &p->opts;
    size_t rows, n_shards = (size_t)o->num_shards, idx = (size_t)o->shard_index;

    p->shard_n = p->ds->n > idx ? (p->ds->n - idx + n_shards - 1) / n_shards : 0;
    p->batches_per_epoch = (int64_t)(p->shard_n / (size_t)o->batch_size);
    if (!o->drop_remainder && p->shard_n % (size_t)o->batch_size != 0)
        p->batches_per_epoch++;
    /* An epoch of no batches would make `epochs: -1` spin forever producing nothing. */
    if (p->batches_per_epoch == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "shard %d of %d holds %zu of the %zu examples: not one batch of %d%s",
                           o->shard_index, o->num_shards, p->shard_n, p->ds->n, o->batch_size,
                           o->drop_remainder ? " (drop_remainder is set)" : "");
    p->buffer_n = (uint64_t)o->shuffle_buffer < p->shard_n ? (size_t)o->shuffle_buffer : p->shard_n;
    rows = p->shard_n < (size_t)o->batch_size ? p->shard_n : (size_t)o->batch_size;
    p->n_slots = o->prefetch > 0 ? o->prefetch + 1 : 1;
    STATUS_CHECK(data_check_budget("the data pipeline's batches and indices",
                                   data_bytes_of(rows, p->ds->feature_len, p->ds->label_len) *
                                           (uint64_t)p->n_slots +
                                       ((uint64_t)p->shard_n * 2 + p->buffer_n) * sizeof(size_t),
                                   o->max_bytes, err));
    p->shard = malloc(p->shard_n * sizeof(size_t));
    p->order = malloc(p->shard_n * sizeof(size_t));
    p->buffer = malloc((p->buffer_n > 0 ? p->buffer_n : 1) * sizeof(size_t));
    p->slots = calloc((size_t)p->n_slots, sizeof(*p->slots));
    if (p->shard == NULL || p->order == NULL || p->buffer == NULL || p->slots == NULL)
        goto nomem;
    for (size_t i = 0; i < p->shard_n; i++)
        p->shard[i] = idx + i * n_shards;
    for (int i = 0; i < p->n_slots; i++) {
        p->slots[i].features = data_alloc_aligned(rows * p->ds->feature_len * sizeof(float));
        p->slots[i].labels = data_alloc_aligned(rows * p->ds->label_len * sizeof(float));
        if (p->slots[i].features == NULL || p->slots[i].labels == NULL)
            goto nomem;
    }
    return STATUS_OK;
nomem:
    return status_fail(err, STATUS_NO_MEMORY, "no memory for %d batches of %d x %zu floats",
                       p->n_slots, o->batch_size, p->ds->feature_len);
}

/* Starts the producer with every signal blocked, so signals reach the daemon's own threads. */
static status_t pipeline_start_thread(data_pipeline_t *p, status_msg_t *err)
{
    sigset_t all, old;
    int e;

    if ((e = pthread_mutex_init(&p->lock, NULL)) != 0)
        return status_fail(err, status_from_errno(e), "pthread_mutex_init: %s", strerror(e));
    if ((e = pthread_cond_init(&p->not_empty, NULL)) != 0)
        goto fail_not_empty;
    if ((e = pthread_cond_init(&p->not_full, NULL)) != 0)
        goto fail_not_full;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    e = pthread_create(&p->thread, NULL, producer_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0)
        goto fail_thread;
    p->threaded = true;
    return STATUS_OK;
fail_thread:
    pthread_cond_destroy(&p->not_full);
fail_not_full:
    pthread_cond_destroy(&p->not_empty);
fail_not_empty:
    pthread_mutex_destroy(&p->lock);
    return status_fail(err, status_from_errno(e), "cannot start the data pipeline thread: %s",
                       strerror(e));
}

status_t data_pipeline_new(const dataset_t *ds, const data_pipeline_opts_t *opts,
                           data_pipeline_t **ret_pipe, status_msg_t *err)
{
    data_pipeline_t *p;
    status_t rc;

    if (ds == NULL || opts == NULL || ret_pipe == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "data pipeline: no dataset or options");
    STATUS_CHECK(opts_check(ds, opts, err));
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "no memory for a data pipeline");
    p->ds = ds;
    p->opts = *opts;
    STATUS_CHECK_GOTO(pipeline_alloc(p, err), rc, fail);
    if (opts->start_epoch < 0 || opts->start_batch < 0 ||
        opts->start_batch >= p->batches_per_epoch) {
        rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                         "cannot start at batch %lld of epoch %lld: an epoch has %lld batches "
                         "(did the data or the batch size change?)",
                         (long long)opts->start_batch, (long long)opts->start_epoch,
                         (long long)p->batches_per_epoch);
        goto fail;
    }
    p->epoch = opts->start_epoch;
    p->batch = opts->start_batch;
    if (p->batch > 0) /* produce() orders an epoch when it begins one */
        epoch_order(p, p->epoch);
    if (opts->prefetch > 0)
        STATUS_CHECK_GOTO(pipeline_start_thread(p, err), rc, fail);
    *ret_pipe = p;
    return STATUS_OK;
fail:
    data_pipeline_free(p);
    return rc;
}

void data_pipeline_free(data_pipeline_t *p)
{
    if (p == NULL)
        return;
    if (p->threaded) {
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_broadcast(&p->not_full);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thread, NULL);
        pthread_cond_destroy(&p->not_full);
        pthread_cond_destroy(&p->not_empty);
        pthread_mutex_destroy(&p->lock);
    }
    for (int i = 0; p->slots != NULL && i < p->n_slots; i++) {
        free(p->slots[i].features);
        free(p->slots[i].labels);
    }
    free(p->slots);
    free(p->shard);
    free(p->order);
    free(p->buffer);
    free(p);
}
