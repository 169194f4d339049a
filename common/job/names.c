/* The name tables and helpers both formats share (internal.h): initializer names in both
 * spellings, activation names, lookups, "did you mean" suggestions and lists of known names. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "job/internal.h"

const char *const job_activation_names[JOB_ACT_COUNT_] = {"linear",
                                                          "relu",
                                                          "sigmoid",
                                                          "tanh",
                                                          "softmax",
                                                          "gelu",
                                                          "elu",
                                                          "selu",
                                                          "softplus",
                                                          "softsign",
                                                          "swish",
                                                          "leaky_relu",
                                                          "relu6",
                                                          "hard_sigmoid",
                                                          "hard_swish",
                                                          "exponential",
                                                          "mish",
                                                          "log_softmax",
                                                          "gelu_approximate"};

static const job_init_info_t inits[] = {
    {"zeros", "Zeros", JOB_INIT_ZEROS, NULL, NULL, 0, 0, false},
    {"ones", "Ones", JOB_INIT_ONES, NULL, NULL, 0, 0, false},
    {"constant", "Constant", JOB_INIT_CONSTANT, "value", NULL, 0, 0, false},
    {"glorot_uniform", "GlorotUniform", JOB_INIT_GLOROT_UNIFORM, NULL, NULL, 0, 0, true},
    {"glorot_normal", "GlorotNormal", JOB_INIT_GLOROT_NORMAL, NULL, NULL, 0, 0, true},
    {"he_uniform", "HeUniform", JOB_INIT_HE_UNIFORM, NULL, NULL, 0, 0, true},
    {"he_normal", "HeNormal", JOB_INIT_HE_NORMAL, NULL, NULL, 0, 0, true},
    {"random_uniform", "RandomUniform", JOB_INIT_RANDOM_UNIFORM, "minval", "maxval", -0.05, 0.05,
     true},
    {"random_normal", "RandomNormal", JOB_INIT_RANDOM_NORMAL, "mean", "stddev", 0, 0.05, true},
    /* Keras's short aliases; "uniform" is Embedding's default. */
    {"uniform", "RandomUniform", JOB_INIT_RANDOM_UNIFORM, "minval", "maxval", -0.05, 0.05, true},
    {"normal", "RandomNormal", JOB_INIT_RANDOM_NORMAL, "mean", "stddev", 0, 0.05, true},
};

static const char *const init_names[] = {
    "zeros",     "ones",           "constant",      "glorot_uniform", "glorot_normal", "he_uniform",
    "he_normal", "random_uniform", "random_normal", "uniform",        "normal",
};

const job_init_info_t *job_init_find(const char *name)
{
    for (size_t i = 0; i < JOB_N_OF(inits); i++)
        if (strcmp(name, inits[i].name) == 0 || strcmp(name, inits[i].class_name) == 0)
            return &inits[i];
    return NULL;
}

const char *const *job_init_names(size_t *ret_n)
{
    *ret_n = JOB_N_OF(init_names);
    return init_names;
}

int job_name_index(const char *s, const char *const *names, size_t n)
{
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions), capped: words
 * longer than 63 characters are never close to anything. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[64][64];

    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *job_suggest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;

    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(s, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

void job_join_names(char *buf, size_t size, const char *const *names, size_t n)
{
    size_t len = strlen(buf);

    for (size_t i = 0; i < n && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "", names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

void job_unknown_name(char *buf, size_t size, const char *what, const char *s,
                      const char *const *names, size_t n)
{
    const char *close = job_suggest(s, names, n);
    const char *plural = what[strlen(what) - 1] == 's' ? "es" : "s"; /* "losses", "layers" */

    if (close != NULL)
        snprintf(buf, size, "unknown %s '%s' (did you mean '%s'?); known %s%s: ", what, s, close,
                 what, plural);
    else
        snprintf(buf, size, "unknown %s '%s'; known %s%s: ", what, s, what, plural);
    job_join_names(buf, size, names, n);
}

bool job_activation_needs_input(job_activation_t act)
{
    return act == JOB_ACT_GELU || act == JOB_ACT_SWISH || act == JOB_ACT_HARD_SWISH ||
           act == JOB_ACT_MISH || act == JOB_ACT_GELU_APPROXIMATE;
}

bool job_activation_parse(const char *s, job_activation_t *ret)
{
    int i = job_name_index(s, job_activation_names, JOB_N_OF(job_activation_names));

    /* Keras's other spellings of the same functions */
    if (s != NULL && strcmp(s, "silu") == 0)
        i = JOB_ACT_SWISH;
    if (s != NULL && strcmp(s, "hard_silu") == 0)
        i = JOB_ACT_HARD_SWISH;
    if (i < 0)
        return false;
    *ret = (job_activation_t)i;
    return true;
}

const char *job_activation_name(job_activation_t a)
{
    return (size_t)a < JOB_N_OF(job_activation_names) ? job_activation_names[a] : "unknown";
}
