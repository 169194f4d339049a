/* tessera train JOB: trains a job in this process on one device, no cluster. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "daemon/config.h"
#include "job/job.h"
#include "train.h"

typedef struct train_cmd_opts {
    int64_t threads;
    int64_t steps;
    int64_t epochs;
    bool resume;
    char *init_from;
    bool evaluate;
    char *device;
} train_cmd_opts_t;

static const config_option_t train_options[] = {
    {"threads", CONFIG_INT, offsetof(train_cmd_opts_t, threads), "1", 1, 256,
     "Compute threads (BLAS runs single-threaded inside them)."},
    {"steps", CONFIG_INT, offsetof(train_cmd_opts_t, steps), "0", 0, INT64_MAX,
     "Train this many steps instead of what the job says (0: the job's length)."},
    {"epochs", CONFIG_INT, offsetof(train_cmd_opts_t, epochs), "0", 0, 1000000,
     "Train this many epochs instead of what the job says (0: the job's length)."},
    {"resume", CONFIG_BOOL, offsetof(train_cmd_opts_t, resume), "false", 0, 0,
     "Continue from the newest checkpoint in the job's checkpoint.dir (as resume: true in the "
     "job); with none there yet, start at step 0."},
    {"init-from", CONFIG_STRING, offsetof(train_cmd_opts_t, init_from), NULL, 0, 0,
     "Start from these weights (as init_from: in the job): a Keras 3 .keras file, or a "
     "safetensors file with Tessera's variable names (tessera export's model.safetensors)."},
    {"evaluate", CONFIG_BOOL, offsetof(train_cmd_opts_t, evaluate), "false", 0, 0,
     "Do not train: evaluate the starting model (--init-from's, --resume's checkpoint's) on the "
     "test split, as Keras's model.evaluate."},
    {"device", CONFIG_STRING, offsetof(train_cmd_opts_t, device), NULL, 0, 0,
     "Compute on this device instead of the job's (device: in the job, default cpu): cpu, cuda "
     "(the first GPU) or cuda:N."},
};

static const config_table_t train_table = {
    .program = "tessera train JOB.yaml",
    .summary = "Trains the job in this process on one device (the one_device strategy), "
               "evaluating on the test split after each epoch.",
    .options = train_options,
    .n_options = sizeof(train_options) / sizeof(train_options[0]),
};

typedef struct progress_state {
    bool tty;
    double last_print;
    const job_t *job; /* its metrics' names */
} progress_state_t;

/* The job's other metrics, as "SEP PREFIXNAME VALUE" each. */
static void print_metrics(const job_t *job, const double *values, const char *sep,
                          const char *prefix)
{
    for (int i = 0; i < job->n_metrics; i++)
        printf("%s%s%s %.4f", sep, prefix, job->metrics[i].name, values[i]);
}

static void print_epoch(const train_progress_t *p, const job_t *job)
{
    if (p->epochs > 0)
        printf("epoch %lld/%lld", (long long)p->epoch + 1, (long long)p->epochs);
    else
        printf("step %lld/%lld (epoch %lld)", (long long)p->step, (long long)p->total_steps,
               (long long)p->epoch + 1);
    printf(": loss %.4f", p->loss);
    if (job_reports_accuracy(job))
        printf(" - accuracy %.4f", p->accuracy);
    print_metrics(job, p->metrics, " - ", "");
    if (p->has_test) {
        printf(" - test_loss %.4f", p->test_loss);
        if (job_reports_accuracy(job))
            printf(" - test_accuracy %.4f", p->test_accuracy);
        print_metrics(job, p->test_metrics, " - ", "test_");
    }
    printf(" - %.0f examples/s - %.1f s\n", p->examples_per_second, p->seconds);
}

static void on_progress(const train_progress_t *p, void *arg)
{
    progress_state_t *st = arg;

    if (p->epoch_end) {
        if (st->tty)
            printf("\r\033[K");
        print_epoch(p, st->job);
        fflush(stdout);
        return;
    }
    if (st->tty) {
        /* A progress bar redrawn at most ten times a second. */
        if (p->seconds - st->last_print < 0.1)
            return;
        int width = 30, filled = p->epoch_steps ? (int)(width * p->epoch_step / p->epoch_steps) : 0;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
        bar[width] = '\0';
        printf("\r\033[Kepoch %lld [%s] %lld/%lld  loss %.4f", (long long)p->epoch + 1, bar,
               (long long)p->epoch_step, (long long)p->epoch_steps, p->loss);
        if (job_reports_accuracy(st->job))
            printf("  accuracy %.4f", p->accuracy);
        printf("  %.0f examples/s", p->examples_per_second);
    } else {
        if (p->seconds - st->last_print < 5.0)
            return;
        printf("step %lld: epoch %lld, loss %.4f", (long long)p->step, (long long)p->epoch + 1,
               p->loss);
        if (job_reports_accuracy(st->job))
            printf(", accuracy %.4f", p->accuracy);
        printf(", %.0f examples/s\n", p->examples_per_second);
    }
    st->last_print = p->seconds;
    fflush(stdout);
}

int cli_train(int argc, char **argv)
{
    train_cmd_opts_t o = {0};
    config_action_t action;
    status_msg_t err = {0};
    job_t job;
    train_result_t res;
    progress_state_t ps = {.tty = isatty(STDOUT_FILENO) != 0, .last_print = 0, .job = &job};
    const char *path = cli_take_positional(&argc, argv);
    job_device_t device;
    int rc = 2;

    memset(&job, 0, sizeof(job));
    if (config_load(&train_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera train: %s\n", err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (path == NULL) {
        fprintf(stderr, "tessera train: name a job file: tessera train JOB.yaml\n");
        goto out;
    }
    if (job_load_file(path, &job, &err) != STATUS_OK) {
        fprintf(stderr, "tessera train: %s\n", err.text);
        goto out;
    }
    if (o.device != NULL && job_device_parse(o.device, &device, &err) != STATUS_OK) {
        fprintf(stderr, "tessera train: --device: %s\n", err.text);
        goto out;
    }
    {
        train_opts_t to = {
            .device = o.device != NULL ? &device : NULL,
            .threads = (int)o.threads,
            .steps = o.steps,
            .epochs = o.epochs,
            .resume = o.resume,
            .init_from = o.init_from,
            .evaluate_only = o.evaluate,
        };
        rc = 1;
        if (train_run(&job, &to, on_progress, &ps, &res, &err) != STATUS_OK) {
            if (ps.tty)
                printf("\n");
            fprintf(stderr, "tessera train: %s\n", err.text);
            goto out;
        }
    }
    if (o.evaluate) {
        printf("evaluated %s at step %lld: test loss %.4f", job.name ? job.name : path,
               (long long)res.steps, res.test_loss);
        if (job_reports_accuracy(&job))
            printf(", test accuracy %.4f", res.test_accuracy);
        print_metrics(&job, res.test_metrics, ", test ", "");
        printf("\n");
        rc = 0;
        goto out;
    }
    if (res.resumed_step > 0)
        printf("resumed %s at step %lld; ", job.name ? job.name : path,
               (long long)res.resumed_step);
    if (res.optimizer_from >= 0)
        printf("its optimizer went on from iteration %lld of %s; ", (long long)res.optimizer_from,
               job.init_from);
    printf("trained %s: %lld steps, %lld epochs in %.1f s (%.0f examples/s); loss %.4f",
           job.name ? job.name : path, (long long)res.steps, (long long)res.epochs, res.seconds,
           res.examples_per_second, res.loss);
    if (job_reports_accuracy(&job))
        printf(", accuracy %.4f", res.accuracy);
    print_metrics(&job, res.metrics, ", ", "");
    if (!isnan(res.test_accuracy)) {
        printf("; test loss %.4f", res.test_loss);
        if (job_reports_accuracy(&job))
            printf(", test accuracy %.4f", res.test_accuracy);
        print_metrics(&job, res.test_metrics, ", test ", "");
    }
    printf("\n");
    rc = 0;
out:
    job_done(&job);
    config_done(&train_table, &o);
    return rc;
}
