/* The narrow products for one instruction set: gemm_narrow.c includes this once for each, with
 * NARROW_ROWS (rows of C a tile keeps in registers), NARROW_FN(name) (the names of this set's
 * functions) and NARROW_TARGET (its target attribute) defined. C is computed 16 columns at a
 * time: two vectors of 8 floats a row, 2 * NARROW_ROWS accumulators. */

/* C's rows [0, rows) and 16 columns from c: (acc ? C : 0) + A B over kd, A's rows lda apart,
 * B's ldb. `full` (a constant where it is inlined) says rows is NARROW_ROWS. */
NARROW_TARGET static inline __attribute__((always_inline)) void
NARROW_FN(nn_tile)(int rows, int kd, const float *restrict a, size_t lda, const float *restrict b,
                   size_t ldb, float *restrict c, size_t ldc, bool acc, bool full)
{
    vec8 s[NARROW_ROWS][2];

    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; h < 2; h++)
            s[i][h] = (full || i < rows) && acc ? LOAD(c + (size_t)i * ldc + 8 * h) : (vec8){0};
    for (int p = 0; p < kd; p++) {
        vec8 b0 = LOAD(b + (size_t)p * ldb), b1 = LOAD(b + (size_t)p * ldb + 8);
        for (int i = 0; i < NARROW_ROWS; i++) {
            float x = full || i < rows ? a[(size_t)i * lda + (size_t)p] : 0.0f;
            s[i][0] += x * b0;
            s[i][1] += x * b1;
        }
    }
    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; full || i < rows ? h < 2 : false; h++)
            STORE(c + (size_t)i * ldc + 8 * h, s[i][h]);
}

/* C[m x n] = (acc ? C : 0) + A[m x kd] B[kd x n]: tiles of NARROW_ROWS rows down A, each
 * reading its rows of A once per 16 columns and B (small: kd x n) from the cache. */
NARROW_TARGET static void NARROW_FN(nn)(int m, int n, int kd, const float *a, size_t lda,
                                        const float *b, size_t ldb, float *c, size_t ldc, bool acc)
{
    int i = 0;

    for (; i + NARROW_ROWS <= m; i += NARROW_ROWS)
        for (int j = 0; j < n; j += 16)
            NARROW_FN(nn_tile)
    (NARROW_ROWS, kd, a + (size_t)i * lda, lda, b + j, ldb, c + (size_t)i * ldc + j, ldc, acc,
     true);
    for (int j = 0; i < m && j < n; j += 16)
        NARROW_FN(nn_tile)
    (m - i, kd, a + (size_t)i * lda, lda, b + j, ldb, c + (size_t)i * ldc + j, ldc, acc, false);
}

/* C's rows [0, rows) and 16 columns from c: C += A^T B over `len` rows of A and B, where C's
 * row i is A's column i. */
NARROW_TARGET static inline __attribute__((always_inline)) void
NARROW_FN(tn_tile)(int rows, int len, const float *restrict a, size_t lda, const float *restrict b,
                   size_t ldb, float *restrict c, size_t ldc, bool full)
{
    vec8 s[NARROW_ROWS][2];

    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; h < 2; h++)
            s[i][h] = full || i < rows ? LOAD(c + (size_t)i * ldc + 8 * h) : (vec8){0};
    for (int r = 0; r < len; r++) {
        const float *ar = a + (size_t)r * lda;
        vec8 b0 = LOAD(b + (size_t)r * ldb), b1 = LOAD(b + (size_t)r * ldb + 8);
        for (int i = 0; i < NARROW_ROWS; i++) {
            float x = full || i < rows ? ar[i] : 0.0f;
            s[i][0] += x * b0;
            s[i][1] += x * b1;
        }
    }
    for (int i = 0; i < NARROW_ROWS; i++)
        for (int h = 0; full || i < rows ? h < 2 : false; h++)
            STORE(c + (size_t)i * ldc + 8 * h, s[i][h]);
}

/* C[m x n] = (acc ? C : 0) + A^T B, A [k x m], B [k x n], k long: the k rows in chunks whose
 * part of A stays in the cache while every tile of C runs down them. */
NARROW_TARGET static void NARROW_FN(tn)(int m, int n, int k, const float *a, size_t lda,
                                        const float *b, size_t ldb, float *c, size_t ldc, bool acc)
{
    for (int i = 0; !acc && i < m; i++)
        memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof(float));
    for (int r = 0; r < k; r += NARROW_CHUNK) {
        int len = k - r < NARROW_CHUNK ? k - r : NARROW_CHUNK;
        const float *ac = a + (size_t)r * lda, *bc = b + (size_t)r * ldb;
        for (int i = 0; i < m; i += NARROW_ROWS)
            for (int j = 0; j < n; j += 16) {
                if (i + NARROW_ROWS <= m)
                    NARROW_FN(tn_tile)
                (NARROW_ROWS, len, ac + i, lda, bc + j, ldb, c + (size_t)i * ldc + j, ldc, true);
                else NARROW_FN(tn_tile)(m - i, len, ac + i, lda, bc + j, ldb,
                                        c + (size_t)i * ldc + j, ldc, false);
            }
    }
}
