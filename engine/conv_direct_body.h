/* The direct convolutions for one instruction set: conv_direct.c includes this once for each,
 * with NARROW_ROWS, NARROW_CHUNK, NARROW_FN(name) and NARROW_TARGET defined as gemm_narrow.c
 * defines them, and the same tiles: NARROW_ROWS rows of 16 columns in 2 * NARROW_ROWS vector
 * accumulators. */

/* Where output row r's window starts in the padded batch. */
static inline size_t NARROW_FN(window_at)(const conv_direct_t *d, int r)
{
    int per = d->oh * d->ow, b = r / per, rem = r % per;

    return (size_t)b * d->image + (size_t)(rem / d->ow) * d->step_y +
           (size_t)(rem % d->ow) * d->step_x;
}

/* out's rows [0, rows) and 16 columns from c += their windows (from base[i]) times 16 columns
 * of the kernel from w: gemm_narrow's nn_tile over the window's kh runs. */
NARROW_TARGET static inline __attribute__((always_inline)) void
NARROW_FN(fwd_tile)(int rows, const float *const *base, const conv_direct_t *d,
                    const float *restrict w, float *restrict c, bool full)
{
    size_t ld = (size_t)d->filters;
    vec8 s[NARROW_ROWS][2];

    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; h < 2; h++)
            s[i][h] = full || i < rows ? LOAD(c + (size_t)i * ld + 8 * h) : (vec8){0};
    for (int ky = 0; ky < d->kh; ky++) {
        size_t off = (size_t)ky * d->row_stride;
        for (int q = 0; q < d->seg; q++, w += ld) {
            vec8 b0 = LOAD(w), b1 = LOAD(w + 8);
            for (int i = 0; i < NARROW_ROWS; i++) {
                float x = full || i < rows ? base[i][off + (size_t)q] : 0.0f;
                s[i][0] += x * b0;
                s[i][1] += x * b1;
            }
        }
    }
    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; full || i < rows ? h < 2 : false; h++)
            STORE(c + (size_t)i * ld + 8 * h, s[i][h]);
}

NARROW_TARGET static void NARROW_FN(fwd)(const conv_direct_t *d, const float *pad, const float *w,
                                         float *out, int lo, int hi)
{
    const float *base[NARROW_ROWS];

    for (int r = lo; r < hi; r += NARROW_ROWS) {
        int rows = hi - r < NARROW_ROWS ? hi - r : NARROW_ROWS;
        for (int i = 0; i < NARROW_ROWS; i++)
            base[i] = pad + NARROW_FN(window_at)(d, r + (i < rows ? i : 0));
        for (int j = 0; j < d->filters; j += 16) {
            float *c = out + (size_t)r * d->filters + j;
            if (rows == NARROW_ROWS)
                NARROW_FN(fwd_tile)(NARROW_ROWS, base, d, w + j, c, true);
            else
                NARROW_FN(fwd_tile)(rows, base, d, w + j, c, false);
        }
    }
}

/* dw's rows [0, rows) and 16 columns from c += the windows' elements at koff[i] (contiguous
 * from koff[0] when contig) times dy's 16 columns from b, over `len` output rows whose windows
 * start at pad + at[r]: gemm_narrow's tn_tile. */
NARROW_TARGET static inline __attribute__((always_inline)) void
NARROW_FN(gk_tile)(int rows, int len, const float *restrict pad, const size_t *at,
                   const size_t *koff, const float *restrict b, size_t ldb, float *restrict c,
                   size_t ldc, bool full, bool contig)
{
    vec8 s[NARROW_ROWS][2];

    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; h < 2; h++)
            s[i][h] = full || i < rows ? LOAD(c + (size_t)i * ldc + 8 * h) : (vec8){0};
    for (int r = 0; r < len; r++) {
        const float *ar = pad + at[r];
        vec8 b0 = LOAD(b + (size_t)r * ldb), b1 = LOAD(b + (size_t)r * ldb + 8);
        if (contig)
            ar += koff[0];
        for (int i = 0; i < NARROW_ROWS; i++) {
            float x = full || i < rows ? ar[contig ? (size_t)i : koff[i]] : 0.0f;
            s[i][0] += x * b0;
            s[i][1] += x * b1;
        }
    }
    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; full || i < rows ? h < 2 : false; h++)
            STORE(c + (size_t)i * ldc + 8 * h, s[i][h]);
}

NARROW_TARGET static void NARROW_FN(gk)(const conv_direct_t *d, const float *pad, const float *dy,
                                        float *dw, int lo, int hi)
{
    size_t at[NARROW_CHUNK], koff[NARROW_ROWS], ld = (size_t)d->filters;

    for (int k = lo; k < hi; k++)
        memset(dw + (size_t)k * ld, 0, ld * sizeof(float));
    for (int r0 = 0; r0 < d->rows; r0 += NARROW_CHUNK) {
        int len = d->rows - r0 < NARROW_CHUNK ? d->rows - r0 : NARROW_CHUNK;
        const float *b = dy + (size_t)r0 * ld;
        for (int r = 0; r < len; r++)
            at[r] = NARROW_FN(window_at)(d, r0 + r);
        for (int k = lo; k < hi; k += NARROW_ROWS) {
            int rows = hi - k < NARROW_ROWS ? hi - k : NARROW_ROWS;
            bool contig = k % d->seg + rows <= d->seg;
            for (int i = 0; i < NARROW_ROWS; i++) {
                int e = k + (i < rows ? i : 0);
                koff[i] = (size_t)(e / d->seg) * d->row_stride + (size_t)(e % d->seg);
            }
            for (int j = 0; j < d->filters; j += 16) {
                float *c = dw + (size_t)k * ld + j;
                if (rows == NARROW_ROWS && contig)
                    NARROW_FN(gk_tile)
                (NARROW_ROWS, len, pad, at, koff, b + j, ld, c, ld, true, true);
                else if (rows == NARROW_ROWS) NARROW_FN(gk_tile)(NARROW_ROWS, len, pad, at, koff,
                                                                 b + j, ld, c, ld, true, false);
                else NARROW_FN(gk_tile)(rows, len, pad, at, koff, b + j, ld, c, ld, false, false);
            }
        }
    }
}

/* The gradient of 16 window elements from column k of the kernel (one run: seg is a multiple
 * of 16) for output rows [0, rows) from r: sum over the filters of dy times the transposed
 * kernel, added into each row's window. */
NARROW_TARGET static inline __attribute__((always_inline)) void
NARROW_FN(gi_tile)(int rows, const conv_direct_t *d, float *restrict dpad, const size_t *at,
                   size_t koff, const float *restrict dy, const float *restrict wt, size_t ldw,
                   bool full)
{
    vec8 s[NARROW_ROWS][2];
    size_t ld = (size_t)d->filters;

    for (int i = 0; i < NARROW_ROWS; i++)
        s[i][0] = s[i][1] = (vec8){0};
    for (int f = 0; f < d->filters; f++) {
        vec8 b0 = LOAD(wt + (size_t)f * ldw), b1 = LOAD(wt + (size_t)f * ldw + 8);
        for (int i = 0; i < NARROW_ROWS; i++) {
            float x = full || i < rows ? dy[(size_t)i * ld + (size_t)f] : 0.0f;
            s[i][0] += x * b0;
            s[i][1] += x * b1;
        }
    }
    for (int i = 0; i < NARROW_ROWS; i++) {
        if (!full && i >= rows)
            break;
        float *p = dpad + at[i] + koff;
        STORE(p, LOAD(p) + s[i][0]);
        STORE(p + 8, LOAD(p + 8) + s[i][1]);
    }
}

NARROW_TARGET static void NARROW_FN(gi)(const conv_direct_t *d, const float *dy, const float *wt,
                                        float *dpad, int lo, int hi)
{
    int per = d->oh * d->ow, k_all = d->kh * d->seg;
    size_t at[NARROW_ROWS];

    /* image by image, each tiled from its first row: the same sums in the same order whatever
     * images a call is given */
    for (int img = lo; img < hi; img += per)
        for (int r = img; r < img + per; r += NARROW_ROWS) {
            int rows = img + per - r < NARROW_ROWS ? img + per - r : NARROW_ROWS;
            const float *y = dy + (size_t)r * d->filters;
            for (int i = 0; i < rows; i++)
                at[i] = NARROW_FN(window_at)(d, r + i);
            for (int k = 0; k < k_all; k += 16) {
                size_t koff = (size_t)(k / d->seg) * d->row_stride + (size_t)(k % d->seg);
                if (rows == NARROW_ROWS)
                    NARROW_FN(gi_tile)
                (NARROW_ROWS, d, dpad, at, koff, y, wt + k, (size_t)k_all, true);
                else NARROW_FN(gi_tile)(rows, d, dpad, at, koff, y, wt + k, (size_t)k_all, false);
            }
        }
}
