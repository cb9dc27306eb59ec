/*
 * ctimm-validate: timm's validate.py on compiled eval graphs. The model (its
 * eval graph through bn_fold, and amp/channels-last when asked) is run over
 * a split of an ImageFolder or tar (or the embedded shapes set) with timm's
 * eval transform; it prints validate.py's log lines and its " * Acc@1 ..."
 * summary, the results as JSON after "--result", and writes --results-file
 * (csv or json) with validate.py's columns. --model-list FILE (or --model
 * naming a file, as validate.py allows) validates each model in turn, sorted
 * by top-1; a model that fails is reported and the rest still run.
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
#include "cli/real_labels.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/safetensors.h"
#include "runtime/weights_file.h"
#include "train/meter.h"

static const char *const prog = "ctimm-validate";

static const char *const usage =
    "usage: ctimm-validate [DATA_DIR] [--data-dir DIR] [--dataset folder|tar|shapes|wds/NAME] [--split validation]\n"
    "                      [--class-map FILE] [-m|--model test_resnet] [--model-list FILE]\n"
    "                      [--checkpoint|--pretrained-path CKPT] [--use-ema] [--pretrained] [--num-classes N]\n"
    "                      [--img-size N] [--use-train-size]"
    "                      [--in-chans 1|3|4] [--input-img-mode RGB|L|RGBA] [--input-size C H W] [--crop-pct P]\n"
    "                      [--crop-mode center|squash|border] [--mean M [M M M]] [--std S [S S S]]\n"
    "                      [--interpolation bilinear|bicubic|nearest]\n"
    "                      [-b 256] [-j 4] [--amp] [--amp-dtype float16|bfloat16] [--channels-last]\n"
    "                      [--device cpu|cuda|ref] [--log-freq 10] [--valid-labels FILE] [--real-labels real.json]\n"
    "                      [--results-file FILE] [--results-format csv|json] [--gp POOL] [--model-kwargs K=V ...]\n"
    "With no DATA_DIR it validates on the embedded shapes dataset's val split.\n"
    "--checkpoint takes a ctimm or timm safetensors state_dict, or a PyTorch .pth/.pth.tar/.bin\n"
    "(a state_dict or timm's train.py checkpoint); --use-ema takes the model EMA from a\n"
    "ctimm-train checkpoint's .state file or a train.py checkpoint's state_dict_ema.\n"
    "--pretrained loads timm's weights of --model (its default tag, or name one: resnet50.a1_in1k) from\n"
    "the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), with\n"
    "their config.json's data config; ctimm never downloads (huggingface-cli download timm/NAME.TAG).\n"
    "Without --img-size, --input-size or --crop-pct the model's test-time size and crop are used where its\n"
    "weights have them (resnet50.a1_in1k: 288, 1.0), as validate.py does; --use-train-size keeps training's.\n"
    "--gp token|avg|map (convnets: avg) and --model-kwargs (Python literals: img_size of a ViT, at the data's\n"
    "size, and a ViT's class_token, reg_tokens, fc_norm, no_embed_class, init_values, qkv_bias) go to the model\n"
    "as validate.py's create_model(global_pool=, **model_kwargs); the keys validate.py passes itself are refused.\n"
    "--input-img-mode (validate.py's; default RGB for 3 channels, else L) must make the model's channel count:\n"
    "RGBA takes --in-chans 4.\n";

typedef struct Args {
    EvalSetup u; /* data, model, checkpoint, device: the flags shared with ctimm-infer */
    const char *model, *model_list, *results_file, *results_format, *valid_labels, *real_labels;
    int log_freq;
    const char *gp, *model_kwargs[CT_MAX_MODEL_KWARGS]; /* read into u.kw after the loop */
    int n_model_kwargs;
} Args;

/* One model's results: validate.py's columns. */
typedef struct Result {
    char model[128], interpolation[16];
    double top1, top5, param_count, crop_pct;
    int img_size, ok;
} Result;

/* 0: go on; 1: done (--help); -1: bad arguments (a message was printed). */
static int parse_args(int argc, char **argv, Args *a)
{
    enum { O_CLASS_MAP = 1000, O_LIST, O_EMA, O_LOG, O_VALID, O_RESULTS, O_FORMAT, O_REAL, O_TRAIN_SIZE, O_GP,
           O_KWARGS, O_IMG_MODE };
    static const struct option longs[] = {
        EVAL_LONG_OPTIONS, {"class-map", 1, 0, O_CLASS_MAP}, {"model", 1, 0, 'm'}, {"model-list", 1, 0, O_LIST},
        {"use-ema", 0, 0, O_EMA}, {"log-freq", 1, 0, O_LOG}, {"valid-labels", 1, 0, O_VALID},
        {"real-labels", 1, 0, O_REAL}, {"results-file", 1, 0, O_RESULTS}, {"results-format", 1, 0, O_FORMAT},
        {"use-train-size", 0, 0, O_TRAIN_SIZE}, {"gp", 1, 0, O_GP}, {"model-kwargs", 1, 0, O_KWARGS},
        {"input-img-mode", 1, 0, O_IMG_MODE},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *a = (Args){.u = eval_setup_default(4), .model = "test_resnet", .results_format = "csv", .log_freq = 10};
    a->u.eo.use_test_size = 1; /* validate.py: the test-time size unless --use-train-size */
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":m:b:j:h", longs, NULL)) != -1) {
        if (eval_option(prog, c, argc, argv, &a->u, &bad))
            continue;
        switch (c) {
        case O_CLASS_MAP: a->u.class_map = optarg; break;
        case 'm': a->model = optarg; break;
        case O_LIST: a->model_list = optarg; break;
        case O_EMA: a->u.ema = 1; break;
        case O_LOG: bad = cli_int(prog, "--log-freq", optarg, 1, 1 << 30, &a->log_freq); break;
        case O_VALID: a->valid_labels = optarg; break;
        case O_REAL: a->real_labels = optarg; break;
        case O_RESULTS: a->results_file = optarg; break;
        case O_FORMAT: a->results_format = optarg; break;
        case O_TRAIN_SIZE: a->u.eo.use_test_size = 0; break;
        case O_GP: a->gp = optarg; break;
        case O_IMG_MODE: a->u.eo.input_img_mode = optarg; break;
        case O_KWARGS: bad = cli_model_kwargs(prog, optarg, argc, argv, a->model_kwargs, &a->n_model_kwargs); break;
        case 'h': fputs(usage, stdout); return 1;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return -1;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return -1;
        }
    }
    if (bad || cli_model_options(prog, a->gp, a->model_kwargs, a->n_model_kwargs, validate_py_model_kwargs,
                                 "validate.py", &a->u.kw))
        return -1;
    if (cli_positional(prog, argc, argv, &a->u.data_dir))
        return -1;
    return 0;
}

/* --valid-labels: one class index a line (validate.py keeps those logits). */
static int read_valid_labels(const char *path, int classes, int **out, int *n, CtErr *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_fail(err, "--valid-labels %s: %s", path, strerror(errno));
    int cap = 64, line = 0;
    long v;
    *out = malloc(sizeof **out * (size_t)cap);
    CT_ASSERT(*out != NULL);
    *n = 0;
    char buf[64];
    while (fgets(buf, sizeof buf, f)) {
        char *end;
        line++;
        v = strtol(buf, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n')
            end++;
        if (end == buf || *end || v < 0 || v >= classes) {
            fclose(f);
            return ct_fail(err, "--valid-labels %s: line %d is not a class index in [0, %d)", path, line, classes);
        }
        if (*n == cap) {
            cap *= 2;
            *out = realloc(*out, sizeof **out * (size_t)cap);
            CT_ASSERT(*out != NULL);
        }
        (*out)[(*n)++] = (int)v;
    }
    fclose(f);
    return *n ? 0 : ct_fail(err, "--valid-labels %s: no class indices", path);
}

/* --use-ema: the "ema.<name>" tensors of CKPT's .state file, under <name>.
 * (A PyTorch checkpoint's EMA was read with its weights: EvalSetup.ema.) */
static int load_ema(const char *ckpt, CtState *s, CtErr *err)
{
    char path[1200];
    size_t n = strlen(ckpt), k = strlen(".safetensors");
    if (n < k || strcmp(ckpt + n - k, ".safetensors"))
        return ct_fail(err, "--use-ema: %s is not a ctimm-train checkpoint (NAME.safetensors)", ckpt);
    snprintf(path, sizeof path, "%.*s.state.safetensors", (int)(n - k), ckpt);
    StFile f;
    if (st_read(path, &f, err))
        return ct_failctx(err, "--use-ema");
    int rc = state_load(s, &f, "ema.", err);
    st_free(&f);
    return rc ? ct_failctx(err, "--use-ema %s (was the run trained with --model-ema?)", path) : 0;
}

/* validate() of validate.py for one model. */
static int validate_one(const Args *a, const char *model_name, Result *res, CtErr *err)
{
    EvalSession s;
    if (eval_open(&s, prog, model_name, &a->u, err))
        return -1;
    const ModelEntry *m = s.m;
    int rc = -1, *valid = NULL, nvalid = 0;
    Progress bar = {0};
    RealLabels real = {0};
    float *sub = NULL;
    int folder_classes = dataset_num_classes(s.ds);
    /* timm's loss would raise on a label past the classifier; refuse before the first batch */
    if (folder_classes > s.classes) {
        ct_fail(err, "%s has %d classes but the model has %d (%s): its labels would fall outside the classifier "
                "(give --num-classes %d or more)", dataset_root(s.ds), folder_classes, s.classes, s.classes_from,
                folder_classes);
        goto done;
    }
    if ((a->valid_labels && read_valid_labels(a->valid_labels, s.classes, &valid, &nvalid, err)) ||
        (a->real_labels && real_labels_open(&real, a->real_labels, s.ds, err)))
        goto done;
    if (a->u.ema && (!a->u.checkpoint ? ct_fail(err, "--use-ema needs --checkpoint")
                                      : !weights_is_torch(a->u.checkpoint) && load_ema(a->u.checkpoint, &s.st, err)))
        goto done;
    res->param_count = (double)graph_param_count(&s.g) / 1e6;
    printf("Model %s created, param count: %lld; classes: %d (%s)\n", m->name, (long long)graph_param_count(&s.g),
           s.classes, s.classes_from);
    if (!a->u.checkpoint && !a->u.pretrained)
        printf("No --checkpoint nor --pretrained: validating the model's initial weights (seed 0)\n");
    printf("Data: %s: %zu images, %d classes; %dx%d%s, crop_pct %g, %s; backend %s%s\n", dataset_root(s.ds),
           dataset_len(s.ds), folder_classes, s.img, s.img, s.chans == 1 ? " gray ('L')" : "", s.et.crop_pct, s.interp,
           s.be->name,
           s.amp == CT_F32 ? "" : s.amp == CT_F16 ? ", amp float16" : ", amp bfloat16");
    sub = valid ? malloc(sizeof *sub * (size_t)a->u.batch_size * (size_t)nvalid) : NULL;
    CT_ASSERT(!valid || sub != NULL);
    EvalMeter meter = {0};
    double t0 = cli_now(), tb = t0;
    progress_begin(&bar, "Validate", s.nbatches, -1);
    const Batch *bt;
    CtTensor logits;
    int got;
    for (size_t i = 0; (got = eval_next(&s, &bt, &logits, err)) == 1; i++) {
        const float *z = logits.data;
        int C = s.classes;
        if (valid) { /* output[:, valid_labels] */
            for (int b = 0; b < bt->n; b++)
                for (int k = 0; k < nvalid; k++)
                    sub[(size_t)b * nvalid + k] = z[(size_t)b * s.classes + valid[k]];
            z = sub;
            C = nvalid;
        }
        int bad_label = -1;
        for (int b = 0; b < bt->n; b++)
            if (bt->labels[b] < 0 || bt->labels[b] >= C)
                bad_label = b;
        if (bad_label >= 0) {
            tensor_free(&logits);
            ct_fail(err, "label %lld is out of range for %d classes", (long long)bt->labels[bad_label], C);
            goto done;
        }
        EvalBatch eb = eval_meter_add(&meter, z, C, bt->labels, bt->n);
        for (int b = 0; a->real_labels && b < bt->n; b++)
            real_labels_add(&real, (size_t)bt->samples[b], z + (size_t)b * C, C);
        tensor_free(&logits);
        double t = cli_now(), avg = (t - t0) / (double)(i + 1);
        progress_update(&bar, i + 1);
        if (i % (size_t)a->log_freq == 0)
            progress_log(&bar,
                         "Test: [%4zu/%zu]  Time: %.3fs (%.3fs, %7.2f/s)  Loss: %7.4f (%6.4f)  Acc@1: %7.3f (%7.3f)  "
                         "Acc@5: %7.3f (%7.3f)\n",
                         i, s.nbatches, t - tb, avg, bt->n / avg, eb.loss, eval_loss(&meter), eb.top1,
                         eval_top1(&meter), eb.top5, eval_top5(&meter));
        tb = t;
    }
    if (got < 0)
        goto done;
    progress_end(&bar);
    /* validate.py rounds the results to 4 places; ReaL's replace the plain ones */
    res->top1 = round((a->real_labels ? real_labels_top1(&real) : eval_top1(&meter)) * 1e4) / 1e4;
    res->top5 = round((a->real_labels ? real_labels_top5(&real) : eval_top5(&meter)) * 1e4) / 1e4;
    res->img_size = s.img;
    res->crop_pct = s.et.crop_pct;
    snprintf(res->model, sizeof res->model, "%s", m->name);
    snprintf(res->interpolation, sizeof res->interpolation, "%s", s.interp);
    res->ok = 1;
    printf(" * Acc@1 %.3f (%.3f) Acc@5 %.3f (%.3f)\n", res->top1, 100 - res->top1, res->top5, 100 - res->top5);
    rc = 0;
done:
    progress_end(&bar);
    free(sub);
    free(valid);
    real_labels_free(&real);
    eval_close(&s);
    return rc;
}

static cJSON *result_json(const Result *r)
{
    cJSON *o = cJSON_CreateObject();
    CT_ASSERT(o != NULL);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNumberToObject(o, "top1", r->top1);
    cJSON_AddNumberToObject(o, "top1_err", round((100 - r->top1) * 1e4) / 1e4);
    cJSON_AddNumberToObject(o, "top5", r->top5);
    cJSON_AddNumberToObject(o, "top5_err", round((100 - r->top5) * 1e4) / 1e4);
    cJSON_AddNumberToObject(o, "param_count", round(r->param_count * 100) / 100);
    cJSON_AddNumberToObject(o, "img_size", r->img_size);
    cJSON_AddNumberToObject(o, "crop_pct", r->crop_pct);
    cJSON_AddStringToObject(o, "interpolation", r->interpolation);
    return o;
}

/* A float as csv.DictWriter writes it. */
static void py_float(FILE *f, double v)
{
    char buf[40];
    cli_py_repr(buf, sizeof buf, v, 0);
    fputs(buf, f);
}

static int write_results(const char *path, const char *format, const Result *rs, int n, int list, CtErr *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ct_fail(err, "--results-file %s: %s", path, strerror(errno));
    if (!strcmp(format, "json")) {
        cJSON *j = list ? cJSON_CreateArray() : NULL;
        for (int i = 0; i < n; i++)
            if (list)
                cJSON_AddItemToArray(j, result_json(&rs[i]));
            else
                j = result_json(&rs[i]);
        char *s = cJSON_Print(j);
        fprintf(f, "%s", s);
        free(s);
        cJSON_Delete(j);
    } else {
        fprintf(f, "model,top1,top1_err,top5,top5_err,param_count,img_size,crop_pct,interpolation\r\n");
        for (int i = 0; i < n; i++) {
            const double v[] = {rs[i].top1, round((100 - rs[i].top1) * 1e4) / 1e4, rs[i].top5,
                                round((100 - rs[i].top5) * 1e4) / 1e4, round(rs[i].param_count * 100) / 100};
            fprintf(f, "%s", rs[i].model);
            for (int k = 0; k < 5; k++) {
                fputc(',', f);
                py_float(f, v[k]);
            }
            fprintf(f, ",%d,", rs[i].img_size);
            py_float(f, rs[i].crop_pct);
            fprintf(f, ",%s\r\n", rs[i].interpolation);
        }
    }
    if (fclose(f))
        return ct_fail(err, "--results-file %s: %s", path, strerror(errno));
    return 0;
}

static int by_top1(const void *a, const void *b)
{
    double x = ((const Result *)a)->top1, y = ((const Result *)b)->top1;
    return (x < y) - (x > y);
}

int main(int argc, char **argv)
{
    Args a;
    cli_init_signals(prog);
    int parsed = parse_args(argc, argv, &a);
    if (parsed)
        return parsed > 0 ? 0 : 2;
    if (strcmp(a.results_format, "csv") && strcmp(a.results_format, "json")) {
        fprintf(stderr, "%s: --results-format %s is not one of csv, json\n", prog, a.results_format);
        return 2;
    }
    CtErr err = {{0}};
    struct stat sb;
    cli_catch_interrupts();
    /* validate.py: --model may name a file of model names */
    const char *list = a.model_list ? a.model_list
                     : (!model_find(a.model) && stat(a.model, &sb) == 0 && S_ISREG(sb.st_mode)) ? a.model : NULL;
    int n = 1, failed = 0;
    char **names = list ? cli_read_lines("--model-list", list, &n, &err) : NULL;
    if (list && !names) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (!list && !cli_model(prog, a.model))
        return 2;
    Result *rs = calloc((size_t)n, sizeof *rs);
    CT_ASSERT(rs != NULL);
    if (list)
        printf("Running bulk validation on these models: ");
    for (int i = 0; list && i < n; i++)
        printf("%s%s", names[i], i + 1 < n ? ", " : "\n");
    int ok = 0;
    for (int i = 0; i < n && !cli_interrupted(); i++) {
        err.msg[0] = 0;
        if (validate_one(&a, list ? names[i] : a.model, &rs[ok], &err)) {
            fprintf(stderr, "%s: %s: %s\n", prog, list ? names[i] : a.model, err.msg);
            failed++;
            continue;
        }
        ok++;
    }
    if (cli_interrupted() && ok < n) { /* no results from a part of the list */
        if (names)
            cli_free_lines(names, n);
        free(rs);
        return 130;
    }
    if (list)
        qsort(rs, (size_t)ok, sizeof *rs, by_top1);
    int rc = failed && (!list || ok == 0) ? 1 : 0;
    if (ok) {
        cJSON *j = list ? cJSON_CreateArray() : result_json(&rs[0]);
        for (int i = 0; list && i < ok; i++)
            cJSON_AddItemToArray(j, result_json(&rs[i]));
        char *s = cJSON_Print(j);
        printf("--result\n%s\n", s);
        free(s);
        cJSON_Delete(j);
        if (a.results_file && write_results(a.results_file, a.results_format, rs, ok, list != NULL, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = 1;
        }
    }
    if (names)
        cli_free_lines(names, n);
    free(rs);
    return rc;
}
