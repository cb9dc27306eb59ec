/*
 * ctimm-infer: timm's inference.py. Runs the model's eval graph (bn_fold,
 * amp, channels-last as asked) over every image of a folder or tar (class
 * subfolders or none) with timm's eval transform and writes, per image, the
 * top-k class indices, class names (from --class-map, the training class
 * order) and probabilities (or logits): the columns inference.py's
 * DataFrame has (filename, index, label, prob/logit; --results-separate-col
 * splits them into index_0, prob_0, ...), as csv, json (by filename) or
 * json-split, to --results-dir/--results-file (default <model>-<img>.<ext>),
 * and as JSON after "--result" on stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "cli/common.h"
#include "cli/eval.h"
#include "cli/progress.h"
#include "runtime/backend.h"
#include "train/meter.h"

static const char *const prog = "ctimm-infer";

static const char *const usage =
    "usage: ctimm-infer [DATA_DIR] [--data-dir DIR] [--dataset folder|tar|wds/NAME] [--split NAME] [-m|--model NAME]\n"
    "                   [--checkpoint CKPT] [--pretrained] [--num-classes N] [--class-map FILE] [--img-size N]\n"
    "                   [--in-chans 1|3] [--input-size C H W] [--crop-pct P] [--crop-mode M] [--mean ...] [--std ...]\n"
    "                   [--interpolation NAME] [-b 256] [-j 2] [--amp] [--amp-dtype float16|bfloat16]\n"
    "                   [--channels-last] [--device cpu|cuda|ref] [--log-freq 10] [--topk 1]\n"
    "                   [--output-type prob|logit] [--include-index] [--exclude-output] [--fullname]\n"
    "                   [--results-dir DIR] [--results-file NAME] [--results-format csv|json|json-split ...]\n"
    "                   [--results-separate-col] [--filename-col filename] [--index-col index]\n"
    "                   [--label-col label] [--output-col NAME] [--no-console-results]\n"
    "                   [--label-type name|description|detail|none]\n"
    "--class-map FILE names the classes (one a line, in class-index order) for the label column.\n"
    "--pretrained loads timm's weights of --model (its default tag, or name one: resnet50.a1_in1k) from\n"
    "the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).\n";

typedef struct Args {
    EvalSetup u; /* data, model, checkpoint, device: the flags shared with ctimm-validate */
    const char *model, *class_map, *output_type, *label_type;
    const char *results_dir, *results_file, *formats[4], *filename_col, *index_col, *label_col, *output_col;
    int nformats, log_freq, topk, include_index, exclude_output, fullname, separate_col, no_console;
} Args;

static int parse_args(int argc, char **argv, Args *a)
{
    enum { O_CLASS_MAP = 1000, O_LOG, O_TOPK, O_OUT_TYPE, O_INDEX, O_EXCLUDE, O_FULL, O_RDIR, O_RFILE, O_RFMT,
           O_SEP, O_FCOL, O_ICOL, O_LCOL, O_OCOL, O_NOCON, O_LTYPE };
    static const struct option longs[] = {
        EVAL_LONG_OPTIONS, {"model", 1, 0, 'm'}, {"class-map", 1, 0, O_CLASS_MAP}, {"log-freq", 1, 0, O_LOG}, {"topk", 1, 0, O_TOPK}, {"output-type", 1, 0, O_OUT_TYPE},
        {"include-index", 0, 0, O_INDEX}, {"exclude-output", 0, 0, O_EXCLUDE}, {"fullname", 0, 0, O_FULL},
        {"results-dir", 1, 0, O_RDIR}, {"results-file", 1, 0, O_RFILE}, {"results-format", 1, 0, O_RFMT},
        {"results-separate-col", 0, 0, O_SEP}, {"filename-col", 1, 0, O_FCOL}, {"index-col", 1, 0, O_ICOL},
        {"label-col", 1, 0, O_LCOL}, {"output-col", 1, 0, O_OCOL}, {"no-console-results", 0, 0, O_NOCON},
        {"label-type", 1, 0, O_LTYPE},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *a = (Args){.u = eval_setup_default(2), .model = "test_resnet", .output_type = "prob",
                .filename_col = "filename", .index_col = "index", .label_col = "label",
                .label_type = "description", .log_freq = 10, .topk = 1};
    a->u.ema = 1; /* inference.py's create_model(checkpoint_path=...): a checkpoint's model EMA when it has one */
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":m:b:j:h", longs, NULL)) != -1) {
        if (eval_option(prog, c, argc, argv, &a->u, &bad))
            continue;
        switch (c) {
        case 'm': a->model = optarg; break;
        case O_CLASS_MAP: a->class_map = optarg; break;
        case O_LOG: bad = cli_int(prog, "--log-freq", optarg, 1, 1 << 30, &a->log_freq); break;
        case O_TOPK: bad = cli_int(prog, "--topk", optarg, 0, 1 << 20, &a->topk); break;
        case O_OUT_TYPE: a->output_type = optarg; break;
        case O_INDEX: a->include_index = 1; break;
        case O_EXCLUDE: a->exclude_output = 1; break;
        case O_FULL: a->fullname = 1; break;
        case O_RDIR: a->results_dir = optarg; break;
        case O_RFILE: a->results_file = optarg; break;
        case O_RFMT: /* nargs='+' */
            a->nformats = 0;
            for (optind--; optind < argc && argv[optind][0] != '-'; optind++) {
                if (a->nformats == 4) {
                    fprintf(stderr, "%s: --results-format takes at most 4 formats\n", prog);
                    return -1;
                }
                a->formats[a->nformats++] = argv[optind];
            }
            break;
        case O_SEP: a->separate_col = 1; break;
        case O_FCOL: a->filename_col = optarg; break;
        case O_ICOL: a->index_col = optarg; break;
        case O_LCOL: a->label_col = optarg; break;
        case O_LTYPE: a->label_type = optarg; break;
        case O_OCOL: a->output_col = optarg; break;
        case O_NOCON: a->no_console = 1; break;
        case 'h': fputs(usage, stdout); return 1;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return -1;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return -1;
        }
    }
    if (bad)
        return -1;
    if (cli_positional(prog, argc, argv, &a->u.data_dir))
        return -1;
    if (!a->nformats)
        a->formats[a->nformats++] = "csv";
    for (int k = 0; k < a->nformats; k++)
        if (strcmp(a->formats[k], "csv") && strcmp(a->formats[k], "json") && strcmp(a->formats[k], "json-split")) {
            fprintf(stderr, "%s: --results-format %s is not one of csv, json, json-split (parquet needs pandas)\n",
                    prog, a->formats[k]);
            return -1;
        }
    /* inference.py's label types name ImageNet's classes (name, description,
     * detail); here the names are the --class-map lines, whichever is asked,
     * and "none" leaves the label column out */
    if (strcmp(a->label_type, "name") && strcmp(a->label_type, "description") && strcmp(a->label_type, "detail") &&
        strcmp(a->label_type, "detailed") && strcmp(a->label_type, "none")) {
        fprintf(stderr, "%s: --label-type %s is not one of name, description, detail, none\n", prog, a->label_type);
        return -1;
    }
    if (strcmp(a->output_type, "prob") && strcmp(a->output_type, "logit")) {
        fprintf(stderr, "%s: --output-type %s is not one of prob, logit\n", prog, a->output_type);
        return -1;
    }
    if (a->exclude_output && !a->topk) {
        fprintf(stderr, "%s: --exclude-output needs --topk > 0 (the indices are all that is left)\n", prog);
        return -1;
    }
    return 0;
}

/* Per image: k outputs and their class indices. */
typedef struct Preds {
    int k, nimg;
    int *idx;   /* [nimg, k] */
    float *val; /* [nimg, k] */
} Preds;

/* Top-k of row in torch.topk's order (eval_before), or all
 * k = C outputs in class order when topk is 0. */
static void take(const float *row, int C, int topk, int *idx, float *val)
{
    if (!topk) {
        for (int c = 0; c < C; c++) {
            idx[c] = c;
            val[c] = row[c];
        }
        return;
    }
    for (int j = 0; j < topk; j++) {
        int best = -1;
        for (int c = 0; c < C; c++) {
            int used = 0;
            for (int q = 0; q < j && !used; q++)
                used = idx[q] == c;
            if (!used && (best < 0 || eval_before(row[c], c, row[best], best)))
                best = c;
        }
        idx[j] = best;
        val[j] = row[best];
    }
}

typedef struct Table {
    const Args *a;
    const Preds *p;
    char **files, **names;
    int nnames, with_index, with_label, with_output, C;
    const char *out_col;
} Table;

static const char *label_of(const Table *t, int c)
{
    static char buf[32];
    if (c < t->nnames)
        return t->names[c];
    snprintf(buf, sizeof buf, "<unmapped:%d>", c); /* timm's label for an index the map lacks */
    return buf;
}

/* The columns of one row, as (name, JSON value) pairs. */
static cJSON *row_json(const Table *t, int i, int with_filename)
{
    cJSON *o = cJSON_CreateObject();
    CT_ASSERT(o != NULL);
    int k = t->p->k;
    const int *idx = t->p->idx + (size_t)i * k;
    const float *val = t->p->val + (size_t)i * k;
    char col[300];
    if (with_filename)
        cJSON_AddStringToObject(o, t->a->filename_col, t->files[i]);
    if (t->a->separate_col && k > 1) {
        for (int j = 0; t->with_index && j < k; j++) {
            snprintf(col, sizeof col, "%s_%d", t->a->index_col, j);
            cJSON_AddNumberToObject(o, col, idx[j]);
        }
        for (int j = 0; t->with_label && j < k; j++) {
            snprintf(col, sizeof col, "%s_%d", t->a->label_col, j);
            cJSON_AddStringToObject(o, col, label_of(t, idx[j]));
        }
        for (int j = 0; t->with_output && j < k; j++) {
            snprintf(col, sizeof col, "%s_%d", t->out_col, j);
            cJSON_AddNumberToObject(o, col, val[j]);
        }
        return o;
    }
    if (t->with_index) {
        if (k == 1)
            cJSON_AddNumberToObject(o, t->a->index_col, idx[0]);
        else
            cJSON_AddItemToObject(o, t->a->index_col, cJSON_CreateIntArray(idx, k));
    }
    if (t->with_label) {
        cJSON *l = k == 1 ? cJSON_CreateString(label_of(t, idx[0])) : cJSON_CreateArray();
        for (int j = 0; k > 1 && j < k; j++)
            cJSON_AddItemToArray(l, cJSON_CreateString(label_of(t, idx[j])));
        cJSON_AddItemToObject(o, t->a->label_col, l);
    }
    if (t->with_output) {
        if (k == 1)
            cJSON_AddNumberToObject(o, t->out_col, val[0]);
        else
            cJSON_AddItemToObject(o, t->out_col, cJSON_CreateFloatArray(val, k));
    }
    return o;
}

/* pandas' to_csv of the same frame: a list cell as numpy prints one ("[3 1]",
 * "[0.5 0.25]", "['cat' 'dog']"), a string quoted when it needs to be. */
static void csv_cell(FILE *f, const cJSON *v, int ints)
{
    char buf[64];
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strpbrk(s, ",\"\r\n")) {
            fputs(s, f);
            return;
        }
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else if (cJSON_IsArray(v)) {
        fputc('[', f);
        for (const cJSON *e = v->child; e; e = e->next) {
            if (cJSON_IsString(e))
                fprintf(f, "'%s'", e->valuestring);
            else if (ints)
                fprintf(f, "%d", e->valueint);
            else {
                cli_py_repr(buf, sizeof buf, (float)e->valuedouble, 1);
                fputs(buf, f);
            }
            if (e->next)
                fputc(' ', f);
        }
        fputc(']', f);
    } else if (ints) {
        fprintf(f, "%d", v->valueint);
    } else {
        cli_py_repr(buf, sizeof buf, (float)v->valuedouble, 1);
        fputs(buf, f);
    }
}

/* Whether column `name` holds class indices. */
static int index_column(const Table *t, const char *name)
{
    size_t n = strlen(t->a->index_col);
    return !strncmp(name, t->a->index_col, n) && (!name[n] || name[n] == '_');
}

static int write_table(const Table *t, const char *format, const char *path, CtErr *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ct_fail(err, "cannot write %s: %s", path, strerror(errno));
    if (!strcmp(format, "csv")) {
        for (int i = 0; i < t->p->nimg; i++) {
            cJSON *o = row_json(t, i, 1);
            if (i == 0) {
                for (const cJSON *e = o->child; e; e = e->next)
                    fprintf(f, "%s%s", e->string, e->next ? "," : "\n");
            }
            for (const cJSON *e = o->child; e; e = e->next) {
                csv_cell(f, e, index_column(t, e->string));
                fputs(e->next ? "," : "\n", f);
            }
            cJSON_Delete(o);
        }
    } else {
        cJSON *j = cJSON_CreateObject();
        CT_ASSERT(j != NULL);
        if (!strcmp(format, "json")) { /* orient='index': {filename: {column: value}} */
            for (int i = 0; i < t->p->nimg; i++)
                cJSON_AddItemToObject(j, t->files[i], row_json(t, i, 0));
        } else { /* orient='split', index=False: {"columns": [...], "data": [[...], ...]} */
            cJSON *cols = cJSON_AddArrayToObject(j, "columns"), *data = cJSON_AddArrayToObject(j, "data");
            for (int i = 0; i < t->p->nimg; i++) {
                cJSON *o = row_json(t, i, 1), *row = cJSON_CreateArray();
                for (cJSON *e = o->child; e; e = e->next) {
                    if (i == 0)
                        cJSON_AddItemToArray(cols, cJSON_CreateString(e->string));
                    cJSON_AddItemToArray(row, cJSON_Duplicate(e, 1));
                }
                cJSON_AddItemToArray(data, row);
                cJSON_Delete(o);
            }
        }
        char *s = cJSON_Print(j);
        fputs(s, f);
        fputc('\n', f);
        free(s);
        cJSON_Delete(j);
    }
    if (fclose(f))
        return ct_fail(err, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

static int infer(const Args *a, CtErr *err)
{
    const ModelEntry *m = cli_model(prog, a->model);
    if (!m)
        return 2;
    int rc = -1, nnames = 0;
    char **names = NULL, **files = NULL;
    Preds p = {0};
    Progress bar = {0};
    EvalSession s;
    if (a->class_map && !(names = cli_read_lines("--class-map", a->class_map, &nnames, err)))
        return -1;
    if (eval_open(&s, prog, a->model, &a->u, err)) {
        if (names)
            cli_free_lines(names, nnames);
        return -1;
    }
    int classes = s.classes;
    printf("classes: %d (%s)\n", classes, s.classes_from);
    if (!a->u.checkpoint && !a->u.pretrained)
        fprintf(stderr, "%s: no --checkpoint nor --pretrained: predicting with the model's initial weights (seed 0)\n",
                prog);
    size_t nimg = dataset_len(s.ds), nb = s.nbatches;
    p.k = a->topk ? (a->topk < classes ? a->topk : classes) : classes;
    p.nimg = (int)nimg;
    p.idx = malloc(sizeof *p.idx * nimg * (size_t)p.k + 1);
    p.val = malloc(sizeof *p.val * nimg * (size_t)p.k + 1);
    files = calloc(nimg + 1, sizeof *files);
    CT_ASSERT(p.idx && p.val && files);
    int probs = !strcmp(a->output_type, "prob");
    double t0 = cli_now(), tb = t0;
    size_t done_imgs = 0;
    progress_begin(&bar, "Predict", nb, -1);
    const Batch *bt;
    CtTensor logits;
    int got;
    for (size_t i = 0; (got = eval_next(&s, &bt, &logits, err)) == 1; i++) {
        float *z = logits.data;
        for (int b = 0; b < bt->n; b++, done_imgs++) {
            float *row = z + (size_t)b * classes;
            if (probs) { /* softmax */
                float mx = row[0];
                double s = 0;
                for (int c = 0; c < classes; c++)
                    mx = row[c] > mx ? row[c] : mx;
                for (int c = 0; c < classes; c++)
                    s += exp((double)row[c] - mx);
                for (int c = 0; c < classes; c++)
                    row[c] = (float)(exp((double)row[c] - mx) / s);
            }
            take(row, classes, a->topk ? p.k : 0, p.idx + done_imgs * (size_t)p.k, p.val + done_imgs * (size_t)p.k);
            char name[1024];
            dataset_sample_name(s.ds, (size_t)bt->samples[b], name, sizeof name);
            const char *base = strrchr(name, '/');
            files[done_imgs] = strdup(a->fullname || !base ? name : base + 1);
        }
        tensor_free(&logits);
        double t = cli_now();
        progress_update(&bar, i + 1);
        if (i % (size_t)a->log_freq == 0)
            progress_log(&bar, "Predict: [%zu/%zu] Time %.3f (%.3f)\n", i, nb, t - tb, (t - t0) / (double)(i + 1));
        tb = t;
    }
    if (got < 0)
        goto done;
    progress_end(&bar);
    Table t = {.a = a, .p = &p, .files = files, .names = names, .nnames = nnames,
               .with_index = a->include_index || !nnames || !strcmp(a->label_type, "none"),
               .with_label = nnames > 0 && strcmp(a->label_type, "none"), .with_output = !a->exclude_output,
               .C = classes, .out_col = a->output_col ? a->output_col : probs ? "prob" : "logit"};
    if (!a->topk)
        t.with_index = t.with_label = 0; /* timm: no top-k, just the outputs */
    char base[1200], path[2600];
    const char *rf = a->results_file;
    if (rf) {
        snprintf(base, sizeof base, "%s", rf);
        char *dot = strrchr(base, '.');
        if (dot && (!strcmp(dot, ".csv") || !strcmp(dot, ".json")))
            *dot = 0; /* inference.py drops a known extension and adds the format's */
    } else {
        snprintf(base, sizeof base, "%s-%d", m->name, s.img);
    }
    if (a->results_dir && mkdir(a->results_dir, 0755) && errno != EEXIST) {
        ct_fail(err, "--results-dir %s: %s", a->results_dir, strerror(errno));
        goto done;
    }
    for (int k = 0; k < a->nformats; k++) {
        snprintf(path, sizeof path, "%s%s%s%s", a->results_dir ? a->results_dir : "", a->results_dir ? "/" : "", base,
                 strcmp(a->formats[k], "csv") ? ".json" : ".csv");
        if (write_table(&t, a->formats[k], path, err))
            goto done;
        printf("Wrote %s (%s)\n", path, a->formats[k]);
    }
    if (!a->no_console) {
        cJSON *j = cJSON_CreateObject();
        for (int i = 0; i < p.nimg; i++)
            cJSON_AddItemToObject(j, files[i], row_json(&t, i, 0));
        char *s = cJSON_Print(j);
        printf("--result\n%s\n", s);
        free(s);
        cJSON_Delete(j);
    }
    rc = 0;
done:
    progress_end(&bar);
    for (int i = 0; files && i < p.nimg; i++)
        free(files[i]);
    free(files);
    if (names)
        cli_free_lines(names, nnames);
    free(p.idx);
    free(p.val);
    eval_close(&s);
    return rc;
}

int main(int argc, char **argv)
{
    Args a;
    cli_init_signals(prog);
    int parsed = parse_args(argc, argv, &a);
    if (parsed)
        return parsed > 0 ? 0 : 2;
    CtErr err = {{0}};
    cli_catch_interrupts();
    int rc = infer(&a, &err);
    if (rc == -1)
        fprintf(stderr, "%s: %s\n", prog, err.msg);
    return rc && cli_interrupted() ? 130 : rc ? (rc == 2 ? 2 : 1) : 0;
}
