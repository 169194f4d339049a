/* Fuzz target: tf.train.Example (common/files/example.h), as the tfrecord data source decodes
 * every record of a user's files.
 *
 * Input: one serialized Example. The features a Fashion-MNIST job maps ("image", "label") and
 * the names the seeds use are looked up, counted and decoded; the counts must agree with what
 * the decoders write, and a decoded Example written again must decode the same. */
#include <stdlib.h>
#include <string.h>

#include "files/example.h"
#include "fuzz_common.h"

#define MAX_VALUES 4096

static const char *const names[] = {"image", "label", "x", "id", "s", ""};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

/* Writes f back under name and checks the copy decodes to the same values. */
static void round_trip(const char *name, const example_feature_t *f, const float *v, size_t n)
{
    example_writer_t w = {0};
    example_feature_t g;
    float *again = malloc((n + 1) * sizeof(float));
    const uint8_t *ex;
    size_t len;

    example_writer_reset(&w);
    example_add_floats(&w, name, v, n);
    if ((ex = example_finish(&w, &len)) != NULL) {
        if (example_find(ex, len, name, &g) != 1 || example_floats(&g, again, n) != 0)
            fuzz_fail("example", "feature %s written again does not read back", name);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&again[i], &v[i], sizeof(float)) != 0 && f->kind == EXAMPLE_FLOAT_LIST)
                fuzz_fail("example", "value %zu of %s changed in a round trip", i, name);
    }
    example_writer_free(&w);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = (uint8_t *)fuzz_copy(data, size);
    float *v = malloc(MAX_VALUES * sizeof(float));

    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        example_feature_t f;
        if (example_find(copy, size, names[k], &f) != 1)
            continue;
        if (f.data < copy || f.data + f.len > copy + size)
            fuzz_fail("example", "feature %s points outside the input", names[k]);
        int64_t n = example_count(&f);
        if (f.kind == EXAMPLE_BYTES_LIST) {
            const uint8_t *b;
            size_t len;
            int rc = example_bytes(&f, &b, &len);
            if ((rc == 1) != (n > 0) || (rc == 1 && (b < copy || b + len > copy + size)))
                fuzz_fail("example", "bytes of %s disagree with their count %lld", names[k],
                          (long long)n);
        } else if (n >= 0 && n <= MAX_VALUES) {
            if (example_floats(&f, v, (size_t)n) != 0)
                fuzz_fail("example", "%s counted %lld values but did not decode them", names[k],
                          (long long)n);
            round_trip(names[k], &f, v, (size_t)n);
        }
    }
    free(v);
    free(copy);
    return 0;
}
