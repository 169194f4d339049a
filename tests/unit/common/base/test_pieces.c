/* Bytes in pieces (base/pieces.h): every cut of a buffer into pieces, empty ones included,
 * reads back the same bytes, and a walk hands out every element once, in order, in place where
 * a piece holds it whole. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pieces.h"
#include "check_run.h"

#define LEN 1000

static uint8_t whole[LEN];

/* Cuts whole[0, LEN) into pieces at `cuts` (ascending, may repeat: empty pieces). */
static pieces_t cut(pieces_part_t *parts, const size_t *cuts, size_t n_cuts)
{
    size_t from = 0, n = 0;

    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : LEN;
        parts[n++] = (pieces_part_t){whole + from, to - from, from};
        from = to;
    }
    return (pieces_t){parts, n, LEN};
}

static void random_cuts(unsigned *seed, size_t *cuts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cuts[i] = (size_t)rand_r(seed) % (LEN + 1);
    for (size_t i = 1; i < n; i++) /* insertion sort */
        for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            size_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
}

START_TEST(reads_and_spans_give_the_bytes_of_the_whole)
{
    unsigned seed = 7;

    for (size_t i = 0; i < LEN; i++)
        whole[i] = (uint8_t)(i * 31 + 5);
    for (int round = 0; round < 200; round++) {
        size_t cuts[12], n_cuts = (size_t)(round % 12);
        pieces_part_t parts[13];
        pieces_t p;
        uint8_t got[LEN];
        random_cuts(&seed, cuts, n_cuts);
        p = cut(parts, cuts, n_cuts);
        for (int k = 0; k < 50; k++) {
            size_t at = (size_t)rand_r(&seed) % LEN, len = (size_t)rand_r(&seed) % (LEN - at + 1);
            const uint8_t *in_one;
            const pieces_part_t *pc = &p.v[pieces_find(&p, at)];
            ck_assert(at >= pc->at && at < pc->at + pc->len);
            pieces_read(&p, at, got, len);
            ck_assert_int_eq(memcmp(got, whole + at, len), 0);
            if (pieces_span(&p, at, len, &in_one)) {
                if (len > 0)
                    ck_assert_ptr_eq(in_one, whole + at);
            } else {
                ck_assert_uint_gt(at + len, pc->at + pc->len); /* only when it crosses a cut */
            }
        }
    }
}
END_TEST

START_TEST(a_walk_hands_out_every_element_once_in_order)
{
    unsigned seed = 11;

    for (size_t i = 0; i < LEN; i++)
        whole[i] = (uint8_t)(i * 7 + 3);
    for (int round = 0; round < 300; round++) {
        static const size_t elems[] = {1, 2, 4, 8};
        size_t cuts[20], n_cuts = (size_t)(round % 20), elem = elems[round % 4];
        pieces_part_t parts[21];
        pieces_t p;
        pieces_walk_t w;
        const void *run;
        size_t at, count, n, seen = 0, runs = 0;
        uint8_t got[LEN];
        random_cuts(&seed, cuts, n_cuts);
        p = cut(parts, cuts, n_cuts);
        at = (size_t)rand_r(&seed) % LEN;
        n = (size_t)rand_r(&seed) % ((LEN - at) / elem + 1);
        for (pieces_walk_init(&w, &p, at, elem, n); pieces_walk_next(&w, &run, &count); runs++) {
            ck_assert_uint_ge(count, 1);
            ck_assert_uint_le(seen + count, n);
            if (run != w.one) /* in place: a pointer into the whole */
                ck_assert_ptr_eq(run, whole + at + seen * elem);
            else
                ck_assert_uint_eq(count, 1);
            memcpy(got + seen * elem, run, count * elem);
            seen += count;
        }
        ck_assert_uint_eq(seen, n);
        ck_assert_int_eq(memcmp(got, whole + at, n * elem), 0);
        ck_assert_uint_le(runs, 2 * (n_cuts + 1)); /* a run per piece, and the cut elements */
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pieces");
    TCase *tc = tcase_create("pieces");

    tcase_add_test(tc, reads_and_spans_give_the_bytes_of_the_whole);
    tcase_add_test(tc, a_walk_hands_out_every_element_once_in_order);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
