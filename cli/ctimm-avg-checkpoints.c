/*
 * ctimm-avg-checkpoints: timm's avg_checkpoints.py for ctimm-train's
 * checkpoints (and timm's own: --filter '*.pth.tar'). The files matching
 * --input/--filter are ranked by the metric their .state file records
 * (ctimm.metric, better by its ctimm.eval_metric: lower for loss, where timm
 * would take the largest; a PyTorch checkpoint's 'metric'), the best -n are
 * averaged in float64 (the model EMA by default, as timm), clamped to the
 * float32 range and written as float32; integer tensors (BN's
 * num_batches_tracked) are averaged and rounded, keeping their dtype. The
 * output is a timm-loadable safetensors file whose metadata holds the
 * XXH3-128 of its contents; an existing output is never overwritten, and a
 * checkpoint whose tensors do not match the others is refused by name.
 */
#include <float.h>
#include <getopt.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/common.h"
#include "cli/state_dict.h"
#include "runtime/tensor.h"
#include "runtime/weights_file.h"

static const char *const prog = "ctimm-avg-checkpoints";

static const char *const usage =
    "usage: ctimm-avg-checkpoints --input DIR [--filter 'checkpoint-*.safetensors']\n"
    "                             [--output ./averaged.safetensors] [-n 10] [--no-sort] [--no-use-ema]\n";

typedef struct Ckpt {
    char *path;
    double metric;
    int lower_better, has_metric;
} Ckpt;

static int by_metric(const void *a, const void *b)
{
    const Ckpt *x = a, *y = b;
    double u = x->lower_better ? -x->metric : x->metric, v = y->lower_better ? -y->metric : y->metric;
    return (u > v) - (u < v); /* worst first, like timm's sorted() */
}

/* The metric ctimm-train recorded for the checkpoint at path, or a PyTorch
 * checkpoint's 'metric' (timm's train.py's: higher is better, as timm's
 * avg_checkpoints.py takes it). */
static void read_metric(Ckpt *c)
{
    char *end;
    StFile f;
    CtErr err;
    if (weights_is_torch(c->path)) {
        if (weights_read(c->path, 0, &f, NULL, &err))
            return;
        const char *m = st_meta(&f, "metric");
        c->has_metric = m && (c->metric = strtod(m, &end), end != m && !*end && isfinite(c->metric));
        st_free(&f);
        return;
    }
    char spath[1200];
    size_t n = strlen(c->path), k = strlen(".safetensors");
    snprintf(spath, sizeof spath, "%.*s.state.safetensors", (int)(n - k), c->path);
    if (access(spath, F_OK) || st_read(spath, &f, &err))
        return;
    const char *m = st_meta(&f, "ctimm.metric"), *em = st_meta(&f, "ctimm.eval_metric");
    if (m && (c->metric = strtod(m, &end), end != m && !*end && isfinite(c->metric))) {
        c->has_metric = 1;
        c->lower_better = em && !strcmp(em, "loss");
    }
    st_free(&f);
}

static int is_state_file(const char *p)
{
    size_t n = strlen(p), k = strlen(".state.safetensors");
    return n >= k && !strcmp(p + n - k, ".state.safetensors");
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"input", 1, 0, 'i'}, {"filter", 1, 0, 'f'}, {"output", 1, 0, 'o'},
                                          {"no-use-ema", 0, 0, 'E'}, {"no-sort", 0, 0, 'S'},
                                          {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *input = NULL, *filter = "checkpoint-*.safetensors", *output = "./averaged.safetensors";
    int n = 10, use_ema = 1, sort = 1, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:h", longs, NULL)) != -1) {
        switch (c) {
        case 'i': input = optarg; break;
        case 'f': filter = optarg; break;
        case 'o': output = optarg; break;
        case 'E': use_ema = 0; break;
        case 'S': sort = 0; break;
        case 'n':
            if (cli_int(prog, "-n", optarg, 1, 100000, &n))
                return 2;
            break;
        case 'h': fputs(usage, stdout); return 0;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return 2;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return 2;
        }
    }
    if (!input || optind < argc) {
        fprintf(stderr, "%s: %s\n", prog, input ? "unexpected argument" : "--input DIR is required (see --help)");
        return 2;
    }
    if (access(output, F_OK) == 0) {
        fprintf(stderr, "%s: the output %s already exists; give another --output\n", prog, output);
        return 1;
    }
    char pattern[2048];
    snprintf(pattern, sizeof pattern, "%s%s%s", input, input[strlen(input) - 1] == '/' ? "" : "/", filter);
    glob_t gl;
    int grc = glob(pattern, 0, NULL, &gl);
    if (grc && grc != GLOB_NOMATCH) {
        fprintf(stderr, "%s: cannot list %s\n", prog, pattern);
        return 1;
    }
    Ckpt *ck = calloc(grc ? 1 : gl.gl_pathc + 1, sizeof *ck);
    CT_ASSERT(ck != NULL);
    int nck = 0, rc = 1;
    for (size_t i = 0; !grc && i < gl.gl_pathc; i++) {
        if (is_state_file(gl.gl_pathv[i]))
            continue;
        ck[nck].path = gl.gl_pathv[i];
        read_metric(&ck[nck]);
        if (!sort || ck[nck].has_metric)
            nck++;
    }
    int first = 0;
    if (sort) {
        qsort(ck, (size_t)nck, sizeof *ck, by_metric);
        first = nck > n ? nck - n : 0;
    }
    if (nck == first) {
        fprintf(stderr, "%s: no checkpoints %sfound to average in %s\n", prog, sort ? "with a metric " : "", pattern);
        goto done;
    }
    printf("Selected checkpoints:\n");
    for (int i = first; i < nck; i++)
        if (sort)
            printf("%.17g %s\n", ck[i].metric, ck[i].path);
        else
            printf("%s\n", ck[i].path);
    StateDict base;
    CtErr err;
    double **sum = NULL;
    int nt = 0, from_ema = 0;
    for (int i = first; i < nck; i++) {
        StateDict sd;
        if (state_dict_read(ck[i].path, use_ema, &sd, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_sums;
        }
        if (i == first) {
            base = sd;
            nt = sd.n;
            from_ema = sd.from_ema;
            sum = calloc((size_t)(nt ? nt : 1), sizeof *sum);
            CT_ASSERT(sum != NULL);
            for (int t = 0; t < nt; t++) {
                sum[t] = calloc((size_t)(st_numel(&sd.t[t]) ? st_numel(&sd.t[t]) : 1), sizeof **sum);
                CT_ASSERT(sum[t] != NULL);
            }
        } else if (sd.n != nt) {
            fprintf(stderr, "%s: %s has %d tensors but %s has %d: not checkpoints of one model\n", prog, ck[i].path,
                    sd.n, ck[first].path, nt);
            state_dict_free(&sd);
            goto free_sums;
        }
        for (int t = 0; t < nt; t++) {
            const StTensor *a = &base.t[t], *b = &sd.t[t];
            if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
                memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) {
                fprintf(stderr, "%s: %s: tensor %d ('%s') does not match '%s' of %s\n", prog, ck[i].path, t, b->name,
                        a->name, ck[first].path);
                if (i != first)
                    state_dict_free(&sd);
                goto free_sums;
            }
            int64_t cnt = st_numel(b);
            double *tmp = malloc(sizeof *tmp * (size_t)(cnt ? cnt : 1));
            CT_ASSERT(tmp != NULL);
            if (elems_to_double(b->data, b->dtype, cnt, tmp)) {
                fprintf(stderr, "%s: %s: '%s' has a dtype the tool cannot average\n", prog, ck[i].path, b->name);
                free(tmp);
                if (i != first)
                    state_dict_free(&sd);
                goto free_sums;
            }
            for (int64_t e = 0; e < cnt; e++)
                sum[t][e] += tmp[e];
            free(tmp);
        }
        if (i != first)
            state_dict_free(&sd);
    }
    int navg = nck - first;
    StTensor *out = calloc((size_t)(nt ? nt : 1), sizeof *out);
    CT_ASSERT(out != NULL);
    for (int t = 0; t < nt; t++) {
        int64_t cnt = st_numel(&base.t[t]);
        CtDType dt = ct_dtype_is_float(base.t[t].dtype) ? CT_F32 : base.t[t].dtype;
        for (int64_t e = 0; e < cnt; e++) {
            double v = sum[t][e] / navg;
            sum[t][e] = dt == CT_F32 ? fmax(-FLT_MAX, fmin(FLT_MAX, v)) : v;
        }
        out[t] = base.t[t];
        out[t].dtype = dt;
        out[t].nbytes = (size_t)cnt * ct_dtype_size(dt);
        out[t].data = malloc(out[t].nbytes ? out[t].nbytes : 1);
        CT_ASSERT(out[t].data != NULL);
        elems_from_double(sum[t], dt, cnt, out[t].data);
    }
    char hash[33];
    state_dict_hash(out, nt, hash);
    const char *mk[] = {"format", "ctimm.xxh3_128", "ctimm.averaged"}, *mv[] = {"pt", hash, NULL};
    char avg[64];
    snprintf(avg, sizeof avg, "%d checkpoints%s", navg, from_ema ? " (model EMA)" : "");
    mv[2] = avg;
    if (st_write(output, out, nt, mk, mv, 3, &err))
        fprintf(stderr, "%s: %s\n", prog, err.msg);
    else {
        printf("=> Saved the average of %d checkpoints%s to '%s', XXH3-128: %s\n", navg,
               from_ema ? " (model EMA weights)" : "", output, hash);
        rc = 0;
    }
    for (int t = 0; t < nt; t++)
        free(out[t].data);
    free(out);
free_sums:
    if (sum) {
        for (int t = 0; t < nt; t++)
            free(sum[t]);
        free(sum);
        state_dict_free(&base);
    }
done:
    free(ck);
    if (!grc)
        globfree(&gl);
    return rc;
}
