/*
 * ctimm-train: timm's train.py on compiled graphs. It runs the training loop
 * of timm's train_one_epoch and validate on the cpu (or ref) backend: loader
 * batch -> normalise -> mixup/cutmix, random erasing -> the compiled step
 * (forward under --amp's autocast, loss, backward, clipping, update, EMA)
 * -> loss scale and LR schedule; validation each epoch with top-1, top-5 and
 * loss; timm's log lines and summary.csv; with --output, timm's checkpoints
 * (last, model_best, the best --checkpoint-hist checkpoint-<epoch>, recovery
 * checkpoints; cli/train_checkpoint.h) and --resume, bit for bit on the cpu
 * backend, also from the middle of an epoch. A timm flag it does not
 * implement is refused by name, never silently ignored.
 *
 * With no data folder it trains on the embedded default: a generated
 * 10-class JPEG ImageFolder of drawn shapes (runtime/data/shapes.h).
 *
 * Data-parallel (timm's DDP): under an MPI launcher, or started as N ranks
 * by --nproc-per-node N, each rank trains on its shard, the graph averages
 * the gradients (allreduce_mean buckets), rank 0 alone logs and writes, and
 * a run failing on one rank ends them all (cli/train_dist.h).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli/common.h"
#include "cli/eval.h"
#include "cli/progress.h"
#include "cli/train_config.h"
#include "cli/train_checkpoint.h"
#include "cli/train_dist.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/data/augment.h"
#include "runtime/data/loader.h"
#include "runtime/data/mixup.h"
#include "runtime/scaler.h"
#include "runtime/sched.h"

static const char *prog = "ctimm-train"; /* "ctimm-train (rank R)" on ranks other than 0 */

typedef struct Args {
    const char *data_dir, *dataset, *train_split, *val_split, *model, *opt, *sched, *device, *output;
    const char *resume, *initial_checkpoint, *eval_metric;
    int num_classes, img_size, batch_size, val_batch_size, epochs, workers, log_interval, channels_last;
    int no_resume_opt, checkpoint_hist;
    double lr, lr_base, lr_base_size, momentum, weight_decay, smoothing, warmup_lr, min_lr, warmup_epochs, drop,
        drop_path, opt_eps, opt_betas[2];
    int n_betas; /* --opt-betas given: 1 or 2 values, else 0 */
    int seed;
    double clip_grad, model_ema_decay; /* clip_grad < 0: no clipping */
    const char *clip_mode;
    int model_ema, model_ema_warmup;
    /* timm's mixup / cutmix and random erasing flags */
    double mixup, cutmix, cutmix_minmax[2], mixup_prob, mixup_switch_prob, reprob;
    int n_minmax, mixup_off_epoch, recount;
    const char *mixup_mode, *remode, *config;
    /* data and augmentation: timm's train.py defaults; n_* = 0 means the model's */
    const char *class_map, *interpolation, *train_interpolation, *aa, *experiment, *lr_base_scale;
    double scale[2], ratio[2], hflip, vflip, color_jitter, crop_pct, mean[3], std[3], input_size[3], epoch_repeats;
    int n_scale, n_ratio, n_mean, n_std, n_input_size, no_aug;
    char **cfg_words, **cfg_argv; /* -c FILE: the words made from it, and the argv they sit in */
    SchedArgs sch; /* the other scheduler flags; kind, epochs and the three above are filled in at setup */
    int amp, bce_loss, recovery_interval, start_epoch; /* start_epoch < 0: not given */
    const char *amp_dtype;
    double bce_target_thresh; /* < 0: none */
    /* data-parallel training: ranks on this machine (0: as launched), DDP's
     * bucket size, timm's --dist-bn and --sync-bn, the per-step cross-rank
     * check */
    int nproc_per_node, dist_check_params, sync_bn;
    double bucket_cap_mb, dist_timeout;
    const char *dist_bn;
} Args;

static const char *const usage =
    "usage: ctimm-train [DATA_DIR] [--data-dir DIR] [--dataset folder|tar|shapes] [--train-split train]\n"
    "                   [--val-split validation] [--model test_resnet] [--num-classes N] [--img-size N]\n"
    "                   [-b 32] [-vb N] [--epochs 5] [--lr LR] [--lr-base 0.1]\n"
    "                   [--lr-base-size 256] [--momentum 0.9] [--weight-decay 2e-5] [--opt-eps EPS]\n"
    "                   [--opt-betas B1 B2] [--opt sgd|momentum|adam|adamw|nadam|radam|lamb|lambc|lars|larc|\n"
    "                   rmsprop|rmsproptf|adabelief|adagrad]\n"
    "                   [--sched cosine|tanh|step|multistep|plateau|poly|none] [--sched-on-updates]\n"
    "                   [--warmup-epochs 0] [--warmup-lr 1e-5] [--warmup-prefix] [--min-lr 0]\n"
    "                   [--decay-epochs 90] [--decay-milestones 90 180 270] [--decay-rate 0.1]\n"
    "                   [--patience-epochs 10] [--cooldown-epochs 0] [--lr-noise PCT [PCT]]\n"
    "                   [--lr-noise-pct 0.67] [--lr-noise-std 1] [--lr-cycle-mul 1] [--lr-cycle-decay 0.5]\n"
    "                   [--lr-cycle-limit 1] [--lr-k-decay 1]\n"
    "                   [--smoothing 0.1] [--drop 0] [--drop-path 0] [--channels-last] [--seed 42] [-j 2]\n"
    "                   [--log-interval 50] [--device cpu|cuda|ref] [--output DIR] [--resume CKPT]\n"
    "                   [--no-resume-opt] [--initial-checkpoint CKPT] [--checkpoint-hist 10]\n"
    "                   [--eval-metric top1|top5|loss] [-c|--config FILE.yaml]\n"
    "                   [--clip-grad V] [--clip-mode norm|value|agc] [--model-ema] [--model-ema-decay 0.9998]\n"
    "                   [--model-ema-warmup]\n"
    "                   [--mixup 0] [--cutmix 0] [--cutmix-minmax MIN MAX] [--mixup-prob 1]\n"
    "                   [--mixup-switch-prob 0.5] [--mixup-mode batch|pair|elem] [--mixup-off-epoch 0]\n"
    "                   [--reprob 0] [--remode pixel|rand|const] [--recount 1]\n"
                   "                   [--amp] [--amp-dtype float16|bfloat16] [--bce-loss] [--bce-target-thresh T]\n"
                   "                   [--recovery-interval N] [--start-epoch N]\n"
                   "                   [--nproc-per-node N] [--bucket-cap-mb 25] [--dist-bn reduce|broadcast|none]\n"
                   "                   [--sync-bn] [--dist-check-params] [--dist-timeout 1800]\n"
    "With no DATA_DIR it trains on the embedded shapes dataset (generated once under\n"
    "$CTIMM_DATA_DIR, else ~/.cache/ctimm/data). Data-parallel: --nproc-per-node N, or\n"
    "mpirun -np N ctimm-train ... (tools/distributed_train.sh N ...).\n";

enum { OPT_BASE = 1000 };

/* Scheduler flags, long only. */
enum {
    OPT_SCHED_ON_UPDATES = 2000, OPT_DECAY_EPOCHS, OPT_DECAY_MILESTONES, OPT_DECAY_RATE, OPT_PATIENCE,
    OPT_COOLDOWN, OPT_WARMUP_PREFIX, OPT_NOISE, OPT_NOISE_PCT, OPT_NOISE_STD, OPT_CYCLE_MUL, OPT_CYCLE_DECAY,
    OPT_CYCLE_LIMIT, OPT_K_DECAY
};

/* Mixup, random erasing and config flags, long only. */
enum {
    OPT_MIXUP = 3000, OPT_CUTMIX, OPT_CUTMIX_MINMAX, OPT_MIXUP_PROB, OPT_MIXUP_SWITCH_PROB, OPT_MIXUP_MODE,
    OPT_MIXUP_OFF_EPOCH, OPT_REPROB, OPT_REMODE, OPT_RECOUNT, OPT_CONFIG
};

/* Data, augmentation and output flags, long only. */
enum {
    OPT_CLASS_MAP = 5000, OPT_INPUT_SIZE, OPT_CROP_PCT, OPT_MEAN, OPT_STD, OPT_INTERPOLATION, OPT_TRAIN_INTERP,
    OPT_NO_AUG, OPT_SCALE, OPT_RATIO, OPT_HFLIP, OPT_VFLIP, OPT_COLOR_JITTER, OPT_AA, OPT_EXPERIMENT,
    OPT_EPOCH_REPEATS, OPT_LR_BASE_SCALE
};

/* AMP, BCE, recovery and start-epoch flags, long only. */
enum { OPT_AMP = 6000, OPT_AMP_DTYPE, OPT_BCE_LOSS, OPT_BCE_THRESH, OPT_RECOVERY, OPT_START_EPOCH };

/* Data-parallel flags, long only. */
enum { OPT_NPROC = 7000, OPT_BUCKET_CAP, OPT_DIST_BN, OPT_DIST_CHECK, OPT_SYNC_BN, OPT_DIST_TIMEOUT };

/* Gradient clipping and model EMA flags, long only. */
enum { OPT_CLIP_GRAD = 4000, OPT_CLIP_MODE, OPT_MODEL_EMA, OPT_MODEL_EMA_DECAY, OPT_MODEL_EMA_WARMUP };

static int parse_list(const char *opt, const char *arg, char **argv, int argc, double *out, int max, int *n)
{
    return cli_number_list(prog, opt, arg, argc, argv, out, max, n);
}

static int parse_double(const char *opt, const char *v, double *out) { return cli_double(prog, opt, v, out); }

/* The options that take a list (argparse nargs): a config's YAML list of
 * one becomes a word of comma-joined numbers. */
static const char *const list_flags[] = {"opt-betas", "lr-noise", "decay-milestones", "cutmix-minmax", "input-size",
                                         "mean", "std", "scale", "ratio", NULL};

/* -c/--config FILE: the words of train.py's YAML (cli/train_config.h) go
 * before the command line's own, so the command line wins. They are the
 * Args' (cfg_words, cfg_argv): its strings point into them, so they live
 * until args_free. */
static int load_config(const char *path, const struct option *longs, int *argc, char ***argv, Args *a)
{
    const TrainConfigSpec spec = {longs, list_flags, train_py_unimplemented};
    CtErr err;
    int n;
    if (!(a->cfg_words = train_config_read(path, &spec, &n, &err))) {
        fprintf(stderr, "%s: --config %s: %s\n", prog, path, err.msg);
        return -1;
    }
    char **w = calloc((size_t)*argc + (size_t)n + 1, sizeof *w);
    CT_ASSERT(w != NULL);
    w[0] = (*argv)[0];
    memcpy(w + 1, a->cfg_words, (size_t)n * sizeof *w);
    memcpy(w + 1 + n, *argv + 1, (size_t)(*argc - 1) * sizeof *w);
    *argc += n;
    *argv = a->cfg_argv = w;
    return 0;
}

/* The values no run could use, refused by name before anything starts
 * (torch's optimizers and torchvision's transforms raise on most of them;
 * the rest would fail image by image or train on nonsense). 0, or -1 with
 * a message printed. */
static int check_values(const Args *a)
{
    struct {
        const char *flag;
        double v;
        int ok;
        const char *need;
    } c[] = {
        {"lr-base", a->lr_base, a->lr_base > 0, "> 0"},
        {"lr-base-size", a->lr_base_size, a->lr_base_size > 0, "> 0"},
        {"momentum", a->momentum, a->momentum >= 0, ">= 0"},
        {"weight-decay", a->weight_decay, a->weight_decay >= 0, ">= 0"},
        {"warmup-lr", a->warmup_lr, a->warmup_lr >= 0, ">= 0"},
        {"min-lr", a->min_lr, a->min_lr >= 0, ">= 0"},
        {"warmup-epochs", a->warmup_epochs, a->warmup_epochs >= 0, ">= 0"},
        {"decay-epochs", a->sch.decay_epochs, a->sch.decay_epochs > 0, "> 0"},
        {"decay-rate", a->sch.decay_rate, a->sch.decay_rate >= 0, ">= 0"},
        {"lr-noise-pct", a->sch.noise_pct, a->sch.noise_pct >= 0, ">= 0"},
        {"lr-noise-std", a->sch.noise_std, a->sch.noise_std >= 0, ">= 0"},
        {"lr-cycle-mul", a->sch.cycle_mul, a->sch.cycle_mul > 0, "> 0"},
        {"lr-cycle-decay", a->sch.cycle_decay, a->sch.cycle_decay >= 0, ">= 0"},
        {"lr-k-decay", a->sch.k_decay, a->sch.k_decay > 0, "> 0"},
        {"hflip", a->hflip, a->hflip >= 0 && a->hflip <= 1, "in [0, 1]"},
        {"vflip", a->vflip, a->vflip >= 0 && a->vflip <= 1, "in [0, 1]"},
        {"color-jitter", a->color_jitter, a->color_jitter >= 0, ">= 0"},
        {"mixup", a->mixup, a->mixup >= 0, ">= 0 (a Beta alpha)"},
        {"cutmix", a->cutmix, a->cutmix >= 0, ">= 0 (a Beta alpha)"},
        {"mixup-prob", a->mixup_prob, a->mixup_prob >= 0 && a->mixup_prob <= 1, "in [0, 1]"},
        {"mixup-switch-prob", a->mixup_switch_prob, a->mixup_switch_prob >= 0 && a->mixup_switch_prob <= 1,
         "in [0, 1]"},
        {"reprob", a->reprob, a->reprob >= 0 && a->reprob <= 1, "in [0, 1]"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
        if (!c[k].ok) {
            fprintf(stderr, "%s: --%s %g: must be %s\n", prog, c[k].flag, c[k].v, c[k].need);
            return -1;
        }
    for (int k = 0; k < a->n_betas; k++)
        if (!(a->opt_betas[k] >= 0 && a->opt_betas[k] < 1)) {
            fprintf(stderr, "%s: --opt-betas %g: each beta must be in [0, 1)\n", prog, a->opt_betas[k]);
            return -1;
        }
    for (int k = 0; k < a->n_std; k++)
        if (!(a->std[k] > 0)) {
            fprintf(stderr, "%s: --std %g: must be > 0 (the batch is divided by it)\n", prog, a->std[k]);
            return -1;
        }
    if ((a->n_scale && a->n_scale != 2) || (a->n_ratio && a->n_ratio != 2)) {
        fprintf(stderr, "%s: --scale and --ratio take two values, MIN MAX\n", prog);
        return -1;
    }
    if (a->n_scale && !(a->scale[0] >= 0 && a->scale[0] <= a->scale[1])) {
        fprintf(stderr, "%s: --scale %g %g: needs 0 <= MIN <= MAX (fractions of the image's area)\n", prog,
                a->scale[0], a->scale[1]);
        return -1;
    }
    if (a->n_ratio && !(a->ratio[0] > 0 && a->ratio[0] <= a->ratio[1])) {
        fprintf(stderr, "%s: --ratio %g %g: needs 0 < MIN <= MAX (aspect ratios)\n", prog, a->ratio[0], a->ratio[1]);
        return -1;
    }
    AugPolicy policy;
    CtErr err;
    if (a->aa && *a->aa && aug_parse(a->aa, &policy, &err)) {
        fprintf(stderr, "%s: --aa %s: %s\n", prog, a->aa, err.msg);
        return -1;
    }
    return 0;
}

/* 0: go on; 1: done (--help); -1: bad arguments (a message was printed). */
static int parse_args(int argc, char **argv, Args *a)
{
    static const struct option longs[] = {
        {"data-dir", 1, 0, 'D'}, {"dataset", 1, 0, 'S'}, {"train-split", 1, 0, 'T'}, {"val-split", 1, 0, 'V'},
        {"model", 1, 0, 'm'}, {"num-classes", 1, 0, 'n'}, {"img-size", 1, 0, 'i'}, {"batch-size", 1, 0, 'b'},
        {"validation-batch-size", 1, 0, 'v'}, {"epochs", 1, 0, 'e'}, {"opt", 1, 0, 'o'}, {"lr", 1, 0, 'l'},
        {"lr-base", 1, 0, 'L'}, {"lr-base-size", 1, 0, 'Z'}, {"momentum", 1, 0, 'M'},
        {"weight-decay", 1, 0, 'w'}, {"opt-eps", 1, 0, 'E'}, {"opt-betas", 1, 0, 'B'}, {"sched", 1, 0, 's'}, {"warmup-epochs", 1, 0, 'W'},
        {"warmup-lr", 1, 0, 'R'}, {"min-lr", 1, 0, 'N'}, {"smoothing", 1, 0, 'x'}, {"drop", 1, 0, 'd'},
        {"drop-path", 1, 0, 'p'}, {"channels-last", 0, 0, 'c'}, {"seed", 1, 0, 'r'}, {"workers", 1, 0, 'j'},
        {"log-interval", 1, 0, 'I'}, {"device", 1, 0, 'G'}, {"output", 1, 0, 'O'}, {"help", 0, 0, 'h'},
        {"resume", 1, 0, 'U'}, {"no-resume-opt", 0, 0, 'P'}, {"initial-checkpoint", 1, 0, 'C'},
        {"checkpoint-hist", 1, 0, 'H'}, {"eval-metric", 1, 0, 'K'},
        {"sched-on-updates", 0, 0, OPT_SCHED_ON_UPDATES}, {"decay-epochs", 1, 0, OPT_DECAY_EPOCHS},
        {"decay-milestones", 1, 0, OPT_DECAY_MILESTONES}, {"decay-rate", 1, 0, OPT_DECAY_RATE},
        {"dr", 1, 0, OPT_DECAY_RATE}, {"patience-epochs", 1, 0, OPT_PATIENCE},
        {"cooldown-epochs", 1, 0, OPT_COOLDOWN}, {"warmup-prefix", 0, 0, OPT_WARMUP_PREFIX},
        {"lr-noise", 1, 0, OPT_NOISE}, {"lr-noise-pct", 1, 0, OPT_NOISE_PCT}, {"lr-noise-std", 1, 0, OPT_NOISE_STD},
        {"lr-cycle-mul", 1, 0, OPT_CYCLE_MUL}, {"lr-cycle-decay", 1, 0, OPT_CYCLE_DECAY},
        {"lr-cycle-limit", 1, 0, OPT_CYCLE_LIMIT}, {"lr-k-decay", 1, 0, OPT_K_DECAY},
        {"clip-grad", 1, 0, OPT_CLIP_GRAD}, {"clip-mode", 1, 0, OPT_CLIP_MODE}, {"model-ema", 0, 0, OPT_MODEL_EMA},
        {"model-ema-decay", 1, 0, OPT_MODEL_EMA_DECAY}, {"model-ema-warmup", 0, 0, OPT_MODEL_EMA_WARMUP},
        {"mixup", 1, 0, OPT_MIXUP}, {"cutmix", 1, 0, OPT_CUTMIX}, {"cutmix-minmax", 1, 0, OPT_CUTMIX_MINMAX},
        {"mixup-prob", 1, 0, OPT_MIXUP_PROB}, {"mixup-switch-prob", 1, 0, OPT_MIXUP_SWITCH_PROB},
        {"mixup-mode", 1, 0, OPT_MIXUP_MODE}, {"mixup-off-epoch", 1, 0, OPT_MIXUP_OFF_EPOCH},
        {"reprob", 1, 0, OPT_REPROB}, {"remode", 1, 0, OPT_REMODE}, {"recount", 1, 0, OPT_RECOUNT},
        {"config", 1, 0, OPT_CONFIG},
        {"class-map", 1, 0, OPT_CLASS_MAP}, {"input-size", 1, 0, OPT_INPUT_SIZE}, {"crop-pct", 1, 0, OPT_CROP_PCT},
        {"mean", 1, 0, OPT_MEAN}, {"std", 1, 0, OPT_STD}, {"interpolation", 1, 0, OPT_INTERPOLATION},
        {"train-interpolation", 1, 0, OPT_TRAIN_INTERP}, {"no-aug", 0, 0, OPT_NO_AUG}, {"scale", 1, 0, OPT_SCALE},
        {"ratio", 1, 0, OPT_RATIO}, {"hflip", 1, 0, OPT_HFLIP}, {"vflip", 1, 0, OPT_VFLIP},
        {"color-jitter", 1, 0, OPT_COLOR_JITTER}, {"aa", 1, 0, OPT_AA}, {"experiment", 1, 0, OPT_EXPERIMENT},
        {"epoch-repeats", 1, 0, OPT_EPOCH_REPEATS}, {"lr-base-scale", 1, 0, OPT_LR_BASE_SCALE},
        {"amp", 0, 0, OPT_AMP}, {"amp-dtype", 1, 0, OPT_AMP_DTYPE}, {"bce-loss", 0, 0, OPT_BCE_LOSS},
        {"bce-target-thresh", 1, 0, OPT_BCE_THRESH}, {"recovery-interval", 1, 0, OPT_RECOVERY},
        {"start-epoch", 1, 0, OPT_START_EPOCH}, {"nproc-per-node", 1, 0, OPT_NPROC},
        {"bucket-cap-mb", 1, 0, OPT_BUCKET_CAP}, {"dist-bn", 1, 0, OPT_DIST_BN},
        {"dist-check-params", 0, 0, OPT_DIST_CHECK}, {"sync-bn", 0, 0, OPT_SYNC_BN},
        {"dist-timeout", 1, 0, OPT_DIST_TIMEOUT},
        {0, 0, 0, 0}};
    *a = (Args){.train_split = "train", .val_split = "validation", .model = "test_resnet", .opt = "sgd",
                .sched = "cosine", .device = "cpu", .num_classes = -1, .batch_size = 32, .epochs = 5, .workers = 2,
                .log_interval = 50, .lr = -1, .lr_base = 0.1, .lr_base_size = 256, .momentum = 0.9,
                .weight_decay = 2e-5, .smoothing = 0.1, .warmup_lr = 1e-5, .opt_eps = -1, .seed = 42,
                .checkpoint_hist = 10, .eval_metric = "top1", .clip_grad = -1, .clip_mode = "norm", .model_ema_decay = 0.9998,
                .sch = sched_args_default(),
                .mixup_prob = 1, .mixup_switch_prob = 0.5, .mixup_mode = "batch", .remode = "pixel", .recount = 1,
                .train_interpolation = "random", .scale = {0.08, 1.0}, .ratio = {3.0 / 4.0, 4.0 / 3.0}, .hflip = 0.5,
                .color_jitter = 0.4, .crop_pct = -1, .amp_dtype = "float16", .bce_target_thresh = -1,
                .start_epoch = -1, .bucket_cap_mb = 25, .dist_bn = "reduce",
                .dist_timeout = 1800};
    /* -vb is timm's short form: getopt_long_only would take it, but then
     * every long option could be abbreviated; rewrite just this one. */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-vb"))
            argv[i] = "--validation-batch-size";
        else if (!strcmp(argv[i], "-c")) /* timm's -c FILE */
            argv[i] = "--config";
    for (int i = 1; i < argc; i++)
        for (const TrainPyArg *u = train_py_unimplemented; u->flag; u++)
            if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, u->flag, strlen(u->flag)) &&
                (argv[i][2 + strlen(u->flag)] == '\0' || argv[i][2 + strlen(u->flag)] == '=')) {
                fprintf(stderr, "%s: --%s (timm's train.py flag) is not implemented in ctimm-train yet\n", prog,
                        u->flag);
                return -1;
            }
    for (int i = 1; i < argc; i++) /* the config's words go first: the command line overrides them */
        if (!strncmp(argv[i], "--config", 8) && (argv[i][8] == '=' || (!argv[i][8] && i + 1 < argc))) {
            if (load_config(argv[i][8] ? argv[i] + 9 : argv[i + 1], longs, &argc, &argv, a))
                return -1;
            break;
        }
    opterr = 0;
    int c, idx;
    while ((c = getopt_long(argc, argv, ":b:j:h", longs, &idx)) != -1) {
        double d;
        int bad = 0;
        switch (c) {
        case 'D': a->data_dir = optarg; break;
        case 'S': a->dataset = optarg; break;
        case 'T': a->train_split = optarg; break;
        case 'V': a->val_split = optarg; break;
        case 'm': a->model = optarg; break;
        case 'o': a->opt = optarg; break;
        case 's': a->sched = optarg; break;
        case 'G': a->device = optarg; break;
        case 'O': a->output = optarg; break;
        case 'c': a->channels_last = 1; break;
        case 'U': a->resume = optarg; break;
        case 'P': a->no_resume_opt = 1; break;
        case 'C': a->initial_checkpoint = optarg; break;
        case 'K': a->eval_metric = optarg; break;
        case 'H': bad = cli_int(prog, "--checkpoint-hist", optarg, 1, 64, &a->checkpoint_hist); break;
        case 'n': bad = cli_int(prog, "--num-classes", optarg, 1, 1 << 20, &a->num_classes); break;
        case 'i': bad = cli_int(prog, "--img-size", optarg, 8, 4096, &a->img_size); break;
        case 'b': bad = cli_int(prog, "--batch-size", optarg, 1, 1 << 16, &a->batch_size); break;
        case 'v': bad = cli_int(prog, "--validation-batch-size", optarg, 1, 1 << 16, &a->val_batch_size); break;
        case 'e': bad = cli_int(prog, "--epochs", optarg, 1, 100000, &a->epochs); break;
        case 'j': bad = cli_int(prog, "--workers", optarg, 1, 256, &a->workers); break;
        case 'I': bad = cli_int(prog, "--log-interval", optarg, 1, 1 << 30, &a->log_interval); break;
        case 'r': bad = cli_int(prog, "--seed", optarg, 0, 1 << 30, &a->seed); break;
        case 'l':
            if (!(bad = parse_double("lr", optarg, &a->lr)) && a->lr < 0) { /* a negative one would mean "not given" */
                fprintf(stderr, "%s: --lr %s: must be >= 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case 'L': bad = parse_double("lr-base", optarg, &a->lr_base); break;
        case 'Z': bad = parse_double("lr-base-size", optarg, &a->lr_base_size); break;
        case 'M': bad = parse_double("momentum", optarg, &a->momentum); break;
        case 'w': bad = parse_double("weight-decay", optarg, &a->weight_decay); break;
        case 'E':
            if (!(bad = parse_double("opt-eps", optarg, &a->opt_eps)) && a->opt_eps < 0) {
                fprintf(stderr, "%s: --opt-eps %s: must be >= 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case 'B': bad = parse_list("opt-betas", optarg, argv, argc, a->opt_betas, 2, &a->n_betas); break;
        case 'W': bad = parse_double("warmup-epochs", optarg, &a->warmup_epochs); break;
        case 'R': bad = parse_double("warmup-lr", optarg, &a->warmup_lr); break;
        case 'N': bad = parse_double("min-lr", optarg, &a->min_lr); break;
        case 'x': bad = parse_double("smoothing", optarg, &d) || (a->smoothing = d, d < 0 || d >= 1); break;
        case 'd': bad = parse_double("drop", optarg, &d) || (a->drop = d, d < 0 || d >= 1); break;
        case 'p': bad = parse_double("drop-path", optarg, &d) || (a->drop_path = d, d < 0 || d >= 1); break;
        case OPT_SCHED_ON_UPDATES: a->sch.on_updates = 1; break;
        case OPT_WARMUP_PREFIX: a->sch.warmup_prefix = 1; break;
        case OPT_DECAY_EPOCHS: bad = parse_double("decay-epochs", optarg, &a->sch.decay_epochs); break;
        case OPT_DECAY_RATE: bad = parse_double("decay-rate", optarg, &a->sch.decay_rate); break;
        case OPT_NOISE_PCT: bad = parse_double("lr-noise-pct", optarg, &a->sch.noise_pct); break;
        case OPT_NOISE_STD: bad = parse_double("lr-noise-std", optarg, &a->sch.noise_std); break;
        case OPT_CYCLE_MUL: bad = parse_double("lr-cycle-mul", optarg, &a->sch.cycle_mul); break;
        case OPT_CYCLE_DECAY: bad = parse_double("lr-cycle-decay", optarg, &a->sch.cycle_decay); break;
        case OPT_K_DECAY: bad = parse_double("lr-k-decay", optarg, &a->sch.k_decay); break;
        case OPT_CLIP_GRAD:
            if (!(bad = parse_double("clip-grad", optarg, &a->clip_grad)) && a->clip_grad < 0) {
                fprintf(stderr, "%s: --clip-grad must not be negative\n", prog);
                bad = 1;
            }
            break;
        case OPT_CLIP_MODE: a->clip_mode = optarg; break;
        case OPT_MODEL_EMA: a->model_ema = 1; break;
        case OPT_MODEL_EMA_WARMUP: a->model_ema_warmup = 1; break;
        case OPT_MODEL_EMA_DECAY:
            if (!(bad = parse_double("model-ema-decay", optarg, &a->model_ema_decay)) &&
                (a->model_ema_decay < 0 || a->model_ema_decay > 1)) {
                fprintf(stderr, "%s: --model-ema-decay must be in [0, 1]\n", prog);
                bad = 1;
            }
            break;
        case OPT_PATIENCE: bad = cli_int(prog, "--patience-epochs", optarg, 0, 1 << 20, &a->sch.patience_epochs); break;
        case OPT_COOLDOWN: bad = cli_int(prog, "--cooldown-epochs", optarg, 0, 1 << 20, &a->sch.cooldown_epochs); break;
        case OPT_CYCLE_LIMIT: bad = cli_int(prog, "--lr-cycle-limit", optarg, 0, 1 << 20, &a->sch.cycle_limit); break;
        case OPT_NOISE: bad = parse_list("lr-noise", optarg, argv, argc, a->sch.noise, 2, &a->sch.n_noise); break;
        case OPT_DECAY_MILESTONES: {
            double m[SCHED_MAX_MILESTONES];
            bad = parse_list("decay-milestones", optarg, argv, argc, m, SCHED_MAX_MILESTONES, &a->sch.n_milestones);
            for (int k = 0; !bad && k < a->sch.n_milestones; k++)
                if (m[k] != (int)m[k]) {
                    fprintf(stderr, "%s: --decay-milestones expects whole numbers\n", prog);
                    bad = 1;
                } else {
                    a->sch.decay_milestones[k] = (int)m[k];
                }
            break;
        }
        case OPT_MIXUP: bad = parse_double("mixup", optarg, &a->mixup); break;
        case OPT_CUTMIX: bad = parse_double("cutmix", optarg, &a->cutmix); break;
        case OPT_CUTMIX_MINMAX:
            bad = parse_list("cutmix-minmax", optarg, argv, argc, a->cutmix_minmax, 2, &a->n_minmax);
            break;
        case OPT_MIXUP_PROB: bad = parse_double("mixup-prob", optarg, &a->mixup_prob); break;
        case OPT_MIXUP_SWITCH_PROB: bad = parse_double("mixup-switch-prob", optarg, &a->mixup_switch_prob); break;
        case OPT_MIXUP_MODE: a->mixup_mode = optarg; break;
        case OPT_MIXUP_OFF_EPOCH:
            bad = cli_int(prog, "--mixup-off-epoch", optarg, 0, 1 << 20, &a->mixup_off_epoch);
            break;
        case OPT_REPROB: bad = parse_double("reprob", optarg, &a->reprob); break;
        case OPT_REMODE: a->remode = optarg; break;
        case OPT_RECOUNT: bad = cli_int(prog, "--recount", optarg, 1, 1000, &a->recount); break;
        case OPT_CONFIG: a->config = optarg; break;
        case OPT_CLASS_MAP: a->class_map = optarg; break;
        case OPT_INTERPOLATION: a->interpolation = optarg; break;
        case OPT_TRAIN_INTERP: a->train_interpolation = optarg; break;
        case OPT_AA: a->aa = optarg; break;
        case OPT_EXPERIMENT: a->experiment = optarg; break;
        case OPT_LR_BASE_SCALE: a->lr_base_scale = optarg; break;
        case OPT_NO_AUG: a->no_aug = 1; break;
        case OPT_INPUT_SIZE: bad = parse_list("input-size", optarg, argv, argc, a->input_size, 3, &a->n_input_size); break;
        case OPT_MEAN: bad = parse_list("mean", optarg, argv, argc, a->mean, 3, &a->n_mean); break;
        case OPT_STD: bad = parse_list("std", optarg, argv, argc, a->std, 3, &a->n_std); break;
        case OPT_SCALE: bad = parse_list("scale", optarg, argv, argc, a->scale, 2, &a->n_scale); break;
        case OPT_RATIO: bad = parse_list("ratio", optarg, argv, argc, a->ratio, 2, &a->n_ratio); break;
        case OPT_CROP_PCT:
            if (!(bad = parse_double("crop-pct", optarg, &a->crop_pct)) && !(a->crop_pct > 0)) {
                fprintf(stderr, "%s: --crop-pct %s: must be > 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case OPT_HFLIP: bad = parse_double("hflip", optarg, &a->hflip); break;
        case OPT_VFLIP: bad = parse_double("vflip", optarg, &a->vflip); break;
        case OPT_COLOR_JITTER: bad = parse_double("color-jitter", optarg, &a->color_jitter); break;
        case OPT_EPOCH_REPEATS: bad = parse_double("epoch-repeats", optarg, &a->epoch_repeats); break;
        case OPT_AMP: a->amp = 1; break;
        case OPT_AMP_DTYPE: a->amp_dtype = optarg; break;
        case OPT_BCE_LOSS: a->bce_loss = 1; break;
        case OPT_BCE_THRESH:
            if (!(bad = parse_double("bce-target-thresh", optarg, &a->bce_target_thresh)) &&
                !(a->bce_target_thresh >= 0 && a->bce_target_thresh < 1)) {
                fprintf(stderr, "%s: --bce-target-thresh must be in [0, 1)\n", prog);
                bad = 1;
            }
            break;
        case OPT_RECOVERY: bad = cli_int(prog, "--recovery-interval", optarg, 0, 1 << 30, &a->recovery_interval); break;
        case OPT_START_EPOCH: bad = cli_int(prog, "--start-epoch", optarg, 0, 1 << 20, &a->start_epoch); break;
        case OPT_NPROC: bad = cli_int(prog, "--nproc-per-node", optarg, 1, 4096, &a->nproc_per_node); break;
        case OPT_BUCKET_CAP:
            if (!(bad = parse_double("bucket-cap-mb", optarg, &a->bucket_cap_mb)) && !(a->bucket_cap_mb > 0)) {
                fprintf(stderr, "%s: --bucket-cap-mb must be above 0\n", prog);
                bad = 1;
            }
            break;
        case OPT_DIST_TIMEOUT:
            if (!(bad = parse_double("dist-timeout", optarg, &a->dist_timeout)) && !(a->dist_timeout > 0)) {
                fprintf(stderr, "%s: --dist-timeout must be above 0 seconds\n", prog);
                bad = 1;
            }
            break;
        case OPT_DIST_BN: a->dist_bn = optarg; break;
        case OPT_DIST_CHECK: a->dist_check_params = 1; break;
        case OPT_SYNC_BN: a->sync_bn = 1; break;
        case 'h': fputs(usage, stdout); return 1;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return -1;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return -1;
        }
        if (bad) {
            if (c == 'x' || c == 'd' || c == 'p')
                fprintf(stderr, "%s: --%s must be in [0, 1)\n", prog, longs[idx].name);
            return -1;
        }
    }
    /* train.py's '' means not given for these: their default, read as false */
    const char **unset_if_empty[] = {&a->data_dir, &a->dataset, &a->class_map, &a->interpolation, &a->lr_base_scale,
                                     &a->experiment, &a->output, &a->resume, &a->initial_checkpoint};
    for (size_t i = 0; i < sizeof unset_if_empty / sizeof *unset_if_empty; i++)
        if (*unset_if_empty[i] && !**unset_if_empty[i])
            *unset_if_empty[i] = NULL;
    if (check_values(a))
        return -1;
    return cli_positional(prog, argc, argv, &a->data_dir);
}

/* The data folder: the one given, or the embedded shapes set, made once. */
static int resolve_data(Args *a, char *root, size_t n, CtErr *err)
{
    if (a->data_dir) {
        snprintf(root, n, "%s", a->data_dir);
        return 0;
    }
    if (a->dataset && strcmp(a->dataset, "shapes"))
        return ct_fail(err, "--dataset %s needs a data folder (DATA_DIR or --data-dir)", a->dataset);
    int size;
    if (eval_embedded_data(root, n, &size, err))
        return -1;
    a->val_split = "val";
    if (a->img_size <= 0)
        a->img_size = size;
    return 0;
}

typedef struct Run {
    Args a;
    const ModelEntry *m;
    const CtBackend *be;
    Graph train, eval;
    TrainStep ts;
    CtState state;
    CtState ema_state; /* --model-ema: the eval graph's state, filled from "ema.*" to validate */
    Dataset *train_ds, *val_ds;
    Loader *train_ld, *val_ld;
    int classes, img, vb;
    double mean[3], std[3]; /* --mean/--std, else the model's */
    float *x;
    Mixup mix;          /* used when mixup_active(&mix): soft targets, r->soft [B, classes] */
    float *soft;
    RandomErasing re;   /* --reprob > 0: on the normalised training batch */
    CtDType amp;        /* --amp: CT_F16 or CT_BF16; else CT_F32 */
    LossScaler scaler;  /* --amp f16: the dynamic loss scale */
    int finite_out;     /* --amp f16: the graph output that says the step was applied; else -1 */
    Saver *saver;       /* with --output: for recovery checkpoints */
    double loss_sum;    /* the epoch's losses so far (carried over by a recovery checkpoint) */
    size_t first_batch; /* where the first epoch run starts (a recovery checkpoint's next batch) */
    long skipped;       /* --amp f16: steps skipped for a non-finite gradient */
    long loss_count;    /* the finite losses in loss_sum */
    CkptInfo info;      /* what checkpoints record beside the tensors */
    char scaler_str[64], sched_str[160];
    CtDist *dist;       /* the ranks of a data-parallel run (a world of one otherwise) */
    int rank, world;
} Run;

static int build_graphs(Run *r, CtErr *err)
{
    ModelSpec spec = {.batch_size = r->a.batch_size, .training = 1,
                      .args = {.num_classes = r->classes, .img_size = r->img, .drop_rate = r->a.drop,
                               .drop_path_rate = r->a.drop_path}};
    /* timm's create_optimizer_v2: the optimizer's own defaults, then the
     * flags train.py passes (momentum where it has one, eps and betas when
     * given, weight decay with timm's grouping) */
    OptimSpec opt;
    if (optim_defaults(r->a.opt, &opt))
        return ct_fail(err, "--opt %s is not implemented (%s)", r->a.opt, optim_names);
    if (opt.momentum != 0)
        opt.momentum = r->a.momentum;
    if (r->a.opt_eps >= 0)
        opt.eps = r->a.opt_eps;
    if (r->a.n_betas > 0)
        opt.beta1 = r->a.opt_betas[0];
    if (r->a.n_betas > 1)
        opt.beta2 = r->a.opt_betas[1];
    opt.weight_decay = r->a.weight_decay;
    opt.no_weight_decay = r->m->no_weight_decay;
    if (r->a.clip_grad >= 0) { /* train.py: dispatch_clip_grad(value=clip_grad, mode=clip_mode) */
        static const char *const modes[] = {"norm", "value", "agc"};
        for (int k = 0; k < 3; k++)
            if (!strcmp(r->a.clip_mode, modes[k]))
                opt.clip_mode = (CtClipMode)(CT_CLIP_NORM + k);
        if (opt.clip_mode == CT_CLIP_NONE)
            return ct_fail(err, "--clip-mode %s is not one of norm, value, agc", r->a.clip_mode);
        opt.clip_grad = r->a.clip_grad;
    }
    opt.model_ema = r->a.model_ema;
    /* a step with a non-finite gradient is skipped in the graph (GradScaler) */
    opt.skip_nonfinite = r->amp == CT_F16;
    if (r->world > 1) /* DDP: the gradients averaged over the ranks, in buckets */
        opt.allreduce_bucket_bytes = (int64_t)(r->a.bucket_cap_mb * 1024 * 1024);
    opt.sync_bn = r->world > 1 && r->a.sync_bn; /* train.py: convert_sync_batchnorm when distributed */
    Graph *gs[2] = {&r->train, &r->eval};
    if (model_build(r->m, &spec, &r->train, err))
        return -1;
    spec.training = 0;
    spec.batch_size = r->vb;
    if (model_build(r->m, &spec, &r->eval, err))
        return -1;
    for (int k = 0; k < 2 && r->amp != CT_F32; k++) { /* train.py: forward and validation under autocast */
        Graph a;
        if (amp_cast(gs[k], r->amp, &a, err))
            return -1;
        graph_free(gs[k]);
        *gs[k] = a;
    }
    /* train.py: with mixup the smoothing is in the targets, the loss
     * SoftTargetCrossEntropy, or BinaryCrossEntropy without smoothing */
    LossSpec loss = {CT_LOSS_CROSS_ENTROPY, r->a.smoothing, -1, 0};
    int mixing = mixup_active(&r->mix);
    if (r->a.bce_loss)
        loss = (LossSpec){CT_LOSS_BCE, mixing ? 0 : r->a.smoothing, r->a.bce_target_thresh, mixing};
    else if (mixing)
        loss = (LossSpec){CT_LOSS_SOFT_TARGET, 0, -1, 1};
    if (train_step_build(&r->train, r->train.outputs[0], &loss, &opt, &r->ts, err))
        return -1;
    r->finite_out = -1;
    for (int k = 0; k < r->train.noutputs; k++)
        if (r->ts.finite >= 0 && r->train.outputs[k] == r->ts.finite)
            r->finite_out = k;
    for (int k = 0; k < 2 && r->a.channels_last; k++) {
        Graph l;
        if (layout_channels_last(gs[k], &l, err))
            return -1;
        graph_free(gs[k]);
        *gs[k] = l;
    }
    return backend_check(r->be, &r->train, err) || backend_check(r->be, &r->eval, err) ? -1 : 0;
}

/* train.py's Mixup arguments and RandomErasing (re_count is its max_count).
 * Mixup runs on the normalised batch (timm's Mixup), then random erasing (the
 * prefetcher's order; --no-prefetcher's transform erases before mixing). */
static int setup_augment(Run *r, CtErr *err)
{
    const Args *a = &r->a;
    int mode = mixup_mode_parse(a->mixup_mode);
    if (mode < 0)
        return ct_fail(err, "--mixup-mode %s is not one of batch, pair, elem", a->mixup_mode);
    if (a->n_minmax == 1)
        return ct_fail(err, "--cutmix-minmax takes two values, MIN MAX");
    const double probs[] = {a->mixup_prob, a->mixup_switch_prob, a->reprob};
    const char *pnames[] = {"mixup-prob", "mixup-switch-prob", "reprob"};
    for (int k = 0; k < 3; k++)
        if (!(probs[k] >= 0 && probs[k] <= 1))
            return ct_fail(err, "--%s must be in [0, 1], not %g", pnames[k], probs[k]);
    if (a->mixup < 0 || a->cutmix < 0)
        return ct_fail(err, "--mixup and --cutmix are Beta alphas: >= 0");
    if (a->n_minmax && !(a->cutmix_minmax[0] >= 0 && a->cutmix_minmax[0] < a->cutmix_minmax[1] &&
                         a->cutmix_minmax[1] <= 1))
        return ct_fail(err, "--cutmix-minmax %g %g: needs 0 <= MIN < MAX <= 1", a->cutmix_minmax[0],
                       a->cutmix_minmax[1]);
    r->mix = (Mixup){.mixup_alpha = a->mixup, .cutmix_alpha = a->cutmix, .has_minmax = a->n_minmax == 2,
                     .cutmix_minmax = {a->cutmix_minmax[0], a->cutmix_minmax[1]}, .prob = a->mixup_prob,
                     .switch_prob = a->mixup_switch_prob, .mode = (CtMixupMode)mode, .correct_lam = 1,
                     .label_smoothing = a->smoothing, .num_classes = r->classes, .enabled = 1};
    if (mixup_active(&r->mix) && a->batch_size % 2)
        return ct_fail(err, "mixup/cutmix needs an even --batch-size, not %d (timm asserts it)", a->batch_size);
    CtEraseMode em = CT_ERASE_PIXEL;
    if (!strcmp(a->remode, "const"))
        em = CT_ERASE_CONST;
    else if (!strcmp(a->remode, "rand"))
        em = CT_ERASE_RAND;
    else if (strcmp(a->remode, "pixel"))
        return ct_fail(err, "--remode %s is not one of pixel, rand, const", a->remode);
    r->re = (RandomErasing){.prob = a->reprob, .mode = em, .min_count = 1, .max_count = a->recount};
    return 0;
}

static int open_data(Run *r, const char *root, CtErr *err)
{
    DatasetConfig dc = {.kind = CT_DS_AUTO, .root = root, .split = r->a.train_split, .class_map = r->a.class_map};
    if (r->a.dataset && !strcmp(r->a.dataset, "tar"))
        dc.kind = CT_DS_TAR;
    else if (r->a.dataset && !strcmp(r->a.dataset, "folder"))
        dc.kind = CT_DS_FOLDER;
    else if (r->a.dataset && strcmp(r->a.dataset, "shapes"))
        return ct_fail(err, "--dataset %s is not one of folder, tar, shapes", r->a.dataset);
    if (dataset_open(&r->train_ds, &dc, err))
        return -1;
    dc.split = r->a.val_split;
    if (dataset_open(&r->val_ds, &dc, err))
        return -1;
    r->classes = r->a.num_classes > 0 ? r->a.num_classes : dataset_num_classes(r->train_ds);
    /* timm's loss raises on a label past the classifier; refuse before the first step */
    const Dataset *sets[2] = {r->train_ds, r->val_ds};
    for (int k = 0; k < 2; k++)
        if (dataset_num_classes(sets[k]) > r->classes)
            return ct_fail(err, "%s has %d classes but --num-classes is %d: its labels would fall outside the "
                           "classifier (give --num-classes %d or more, or leave it out)",
                           dataset_root(sets[k]), dataset_num_classes(sets[k]), r->classes,
                           dataset_num_classes(sets[k]));
    const Args *a = &r->a;
    if (a->n_input_size && (a->n_input_size != 3 || a->input_size[0] != 3 || a->input_size[1] != a->input_size[2]))
        return ct_fail(err, "--input-size takes 3 H W with H == W (square inputs only)");
    r->img = a->n_input_size ? (int)a->input_size[1] : a->img_size > 0 ? a->img_size : r->m->cfg.input_size[1];
    for (int c = 0; c < 3; c++) { /* one value stands for all three channels, as in timm */
        r->mean[c] = a->n_mean ? a->mean[a->n_mean == 3 ? c : 0] : r->m->cfg.mean[c];
        r->std[c] = a->n_std ? a->std[a->n_std == 3 ? c : 0] : r->m->cfg.std[c];
    }
    if ((a->n_mean && a->n_mean != 1 && a->n_mean != 3) || (a->n_std && a->n_std != 1 && a->n_std != 3))
        return ct_fail(err, "--mean and --std take 1 or 3 values");
    const char *interp = a->interpolation ? a->interpolation : r->m->cfg.interpolation;
    CtInterp eval_interp = (CtInterp)eval_interp_parse(interp);
    if ((int)eval_interp < 0)
        return ct_fail(err, "--interpolation %s is not one of bilinear, bicubic, nearest", interp);
    TrainTransform tt = train_transform_default(r->img);
    EvalTransform et = eval_transform_default(r->img), noaug = et;
    if (!strcmp(a->train_interpolation, "random"))
        tt.random_interp = 1;
    else if (!strcmp(a->train_interpolation, "bilinear") || !strcmp(a->train_interpolation, "bicubic") ||
             !strcmp(a->train_interpolation, "nearest"))
        tt.interp = a->train_interpolation[2] == 'c' ? CT_INTERP_BICUBIC
                  : a->train_interpolation[0] == 'n' ? CT_INTERP_NEAREST : CT_INTERP_BILINEAR;
    else
        return ct_fail(err, "--train-interpolation %s is not one of random, bilinear, bicubic, nearest",
                       a->train_interpolation);
    if ((a->n_scale && a->n_scale != 2) || (a->n_ratio && a->n_ratio != 2))
        return ct_fail(err, "--scale and --ratio take two values");
    for (int k = 0; k < 2; k++) {
        tt.scale[k] = a->scale[k];
        tt.ratio[k] = a->ratio[k];
    }
    tt.hflip = a->hflip;
    tt.vflip = a->vflip;
    tt.color_jitter = a->color_jitter;
    tt.auto_augment = a->aa;
    et.crop_pct = a->crop_pct > 0 ? a->crop_pct : r->m->cfg.crop_pct;
    et.interp = eval_interp;
    /* --no-aug: timm's transforms_noaug_train, a resize and a center crop */
    noaug.crop_pct = 1.0;
    noaug.interp = eval_interp;
    for (int c = 0; c < 3; c++)
        tt.mean[c] = et.mean[c] = noaug.mean[c] = r->mean[c];
    if (a->epoch_repeats < 0 || a->epoch_repeats != floor(a->epoch_repeats))
        return ct_fail(err, "--epoch-repeats %g: whole numbers only", a->epoch_repeats);
    LoaderConfig lc = {.batch_size = a->batch_size, .num_workers = a->workers, .train = a->no_aug ? NULL : &tt,
                       .eval = a->no_aug ? &noaug : NULL, .seed = (uint64_t)a->seed, .shuffle = 1, .drop_last = 1,
                       .rank = r->rank, .world_size = r->world, .repeats = (int)a->epoch_repeats};
    if (loader_create(&r->train_ld, r->train_ds, &lc, err))
        return -1;
    lc = (LoaderConfig){.batch_size = r->vb, .num_workers = r->a.workers, .eval = &et, .seed = (uint64_t)r->a.seed,
                        .rank = r->rank, .world_size = r->world};
    if (loader_create(&r->val_ld, r->val_ds, &lc, err))
        return -1;
    if (loader_epoch_batches(r->train_ld) == 0)
        return ct_fail(err, "%s: %zu training images make no batch of %d", root, dataset_len(r->train_ds),
                       r->a.batch_size);
    return 0;
}

/* ModelEmaV3.get_decay(step) for update number `step` (from 1): 0 at the
 * first (a copy of the model), then the decay, or with --model-ema-warmup
 * 1 - (1 + s)^(-2/3) up to it (warmup_gamma 1, warmup_power 2/3). */
static double ema_decay(const Args *a, long step)
{
    long s = step - 1;
    if (s <= 0)
        return 0;
    if (!a->model_ema_warmup)
        return a->model_ema_decay;
    double d = 1 - pow(1 + (double)s, -2.0 / 3);
    return d < a->model_ema_decay ? (d > 0 ? d : 0) : a->model_ema_decay;
}

/* ModelEmaV3's deepcopy: every "ema.<name>" state value set to <name>'s. */
static void ema_from_model(CtState *s)
{
    for (int i = 0; i < s->n; i++)
        if (!strncmp(s->e[i].name, "ema.", 4)) {
            int m = state_find(s, s->e[i].name + 4);
            if (m >= 0)
                memcpy(state_data(s, i), state_data(s, m), ct_dtype_size(s->e[i].type.dtype) *
                                                               (size_t)shape_numel(&s->e[i].type.shape));
        }
}

/* The eval graph's state for validating the EMA: each value from "ema.<name>". */
static void ema_view(Run *r)
{
    if (!r->ema_state.e)
        state_create(&r->ema_state, &r->eval);
    for (int i = 0; i < r->ema_state.n; i++) {
        char name[600];
        snprintf(name, sizeof name, "ema.%s", r->ema_state.e[i].name);
        int k = state_find(&r->state, name);
        if (k < 0)
            k = state_find(&r->state, r->ema_state.e[i].name);
        if (k >= 0)
            memcpy(state_data(&r->ema_state, i), state_data(&r->state, k), r->state.e[k].type.dtype ==
                   r->ema_state.e[i].type.dtype ? ct_dtype_size(r->state.e[k].type.dtype) *
                   (size_t)shape_numel(&r->state.e[k].type.shape) : 0);
    }
}

/* Set by SIGINT/SIGTERM: the loop stops after the step it is in. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) { interrupted = sig; }

/* Ctrl-C (or a SIGTERM) asks the run to stop cleanly; a second one kills. */
static void catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    backend_set_stop_flag(&interrupted); /* a kernel compile then ends at once, its cc with it */
}

/* The loss scaler's state, as the checkpoint's "ctimm.amp_scaler" holds it. */
static void sync_scaler(Run *r)
{
    snprintf(r->scaler_str, sizeof r->scaler_str, "%.17g,%d", r->scaler.scale, r->scaler.growth_tracker);
}

/* The plateau schedule's state (the others are functions of the epoch or
 * update), as the checkpoint's "ctimm.sched" holds it. */
static void sync_sched(Run *r, const LrSched *s)
{
    snprintf(r->sched_str, sizeof r->sched_str, "%.17g,%.17g,%.17g,%d,%d,%d", s->lr, s->best, s->restore_lr,
             s->num_bad, s->cooldown_counter, s->has_restore);
}

/* A resumed plateau schedule: exactly where the checkpoint left it. */
static int restore_sched(LrSched *s, const char *str)
{
    LrSched t = *s;
    if (sscanf(str, "%lf,%lf,%lf,%d,%d,%d", &t.lr, &t.best, &t.restore_lr, &t.num_bad, &t.cooldown_counter,
               &t.has_restore) != 6)
        return -1;
    *s = t;
    return 0;
}

/* After a step: the ranks' mean loss in *loss (timm's reduce_tensor), and
 * in *stop whether any rank was asked to stop, so that all stop after the
 * same step; with --dist-check-params, the ranks' parameters compared. */
static int sync_step(Run *r, double *loss, int *stop, CtErr *err)
{
    *stop = interrupted != 0;
    if (r->world == 1)
        return 0;
    double v[2] = {*loss, *stop};
    if (dist_allreduce_sum(r->dist, v, 2, err))
        return -1;
    *loss = v[0] / r->world;
    *stop = v[1] > 0;
    return r->a.dist_check_params ? train_check_params(r->dist, &r->state, err) : 0;
}

/* Whether any rank was asked to stop (1), agreed by all; -1 on error. */
static int stop_agreed(Run *r, CtErr *err)
{
    double v = interrupted != 0;
    if (r->world > 1 && dist_allreduce_sum(r->dist, &v, 1, err))
        return -1;
    return v > 0;
}

/* Ctrl-C while the eval graph's kernels compiled, at the run's first
 * validation: the epoch's training is done, so with --output a recovery
 * checkpoint of all its batches keeps it (resumed, the run validates the
 * epoch). mean, the epoch's mean loss, is saved as a sum over one batch,
 * which gives it back to the bit. The exit status: 130, 1 when the
 * checkpoint cannot be written. */
static int stop_in_validation(Run *r, int epoch, double mean, CtErr *err)
{
    if (!r->saver) {
        printf("Interrupted in epoch %d's validation; nothing saved (no --output)\n", epoch);
        return 130;
    }
    sync_scaler(r);
    if (saver_save_recovery(r->saver, &r->state, &r->info, epoch, (int)loader_epoch_batches(r->train_ld) - 1, mean,
                            !isnan(mean), err)) {
        fprintf(stderr, "%s: %s\n", prog, err->msg);
        return 1;
    }
    printf("Interrupted in epoch %d's validation; resume with --resume %s/%s.safetensors\n", epoch, r->saver->dir,
           r->saver->recovery);
    return 130;
}

/* One epoch of train_one_epoch, from batch `first` (0, or a recovery
 * checkpoint's next batch): 0 and the mean of the finite losses in *mean,
 * 1 when interrupted (after the recovery checkpoint, with --output), -1 on
 * error. The LR is the schedule's, stepped after every update with
 * --sched-on-updates. With --amp f16 the loss is scaled, a step whose
 * gradient is not finite is skipped in the graph and the scale follows
 * GradScaler's rules; without it a non-finite loss stops the run. */
static int train_epoch(Run *r, int epoch, size_t first, LrSched *sched, double *mean, CtErr *err)
{
    size_t nb = loader_epoch_batches(r->train_ld);
    double t0 = cli_now(), data_time = 0;
    long num_updates = (long)epoch * (long)nb + (long)first;
    float lr32 = 0, scale = 1;
    long skipped_here = 0;
    int rc = -1;
    CtTensor *out = calloc((size_t)r->train.noutputs, sizeof *out);
    Progress bar;
    char label[32];
    snprintf(label, sizeof label, "Train %d", epoch);
    progress_begin(&bar, label, nb, r->world > 1 ? 0 : -1); /* mpirun gives every rank a pty, not the user's */
    progress_update(&bar, first);
    if (loader_start_epoch_at(r->train_ld, (uint64_t)epoch, first, err))
        goto done;
    for (size_t i = first; i < nb; i++) {
        const Batch *bt = NULL;
        double td = cli_now();
        if (loader_next(r->train_ld, &bt, err) != 1) {
            if (bt == NULL && !err->msg[0])
                ct_fail(err, "epoch %d ended after %zu of %zu batches", epoch, i, nb);
            goto done;
        }
        eval_normalise(bt, r->a.batch_size, r->mean, r->std, r->x);
        /* mixup, then random erasing: one generator per (seed, epoch, batch),
         * and rank (timm seeds each rank with seed + rank) */
        CtRng rng = rng_for((uint64_t)r->a.seed ^ 0x6d69787570ull ^ ((uint64_t)r->rank << 32), (uint64_t)epoch, i);
        int mixing = mixup_active(&r->mix);
        if (mixing) {
            r->mix.enabled = !(r->a.mixup_off_epoch && epoch >= r->a.mixup_off_epoch);
            if (mixup_apply(&r->mix, r->x, r->a.batch_size, 3, r->img, r->img, bt->labels, r->soft, NULL, &rng,
                            err))
                goto done;
        }
        random_erasing_apply(&r->re, r->x, r->a.batch_size, 3, r->img, r->img, &rng);
        data_time += cli_now() - td;
        double lr = sched_lr(sched);
        lr32 = (float)lr;
        scale = r->finite_out >= 0 ? (float)r->scaler.scale : 1;
        float decay = (float)ema_decay(&r->a, num_updates + 1);
        CtTensor in[5] = {{{{4, {r->a.batch_size, 3, r->img, r->img}}, CT_F32}, r->x},
                          {{{1, {r->a.batch_size}}, CT_I64}, bt->labels},
                          {{{0}, CT_F32}, &lr32},
                          {{{0}, CT_F32}, &scale},
                          {{{0}, CT_F32}, &decay}};
        if (mixing)
            in[1] = (CtTensor){{{2, {r->a.batch_size, r->classes}}, CT_F32}, r->soft};
        int ran = r->be->run(&r->train, &r->state, in, r->ts.ema_decay >= 0 ? 5 : 4, out, err);
        if (ran == CT_INTERRUPTED) { /* Ctrl-C while the step compiled: the run's first step, nothing trained */
            progress_end(&bar);
            printf("Interrupted at epoch %d, batch %zu of %zu, compiling the training step; nothing trained in this "
                   "run\n", epoch, i, nb);
            rc = 1;
            goto done;
        }
        if (ran)
            goto done;
        double loss = *(float *)out[1].data;
        int applied = r->finite_out < 0 || *(float *)out[r->finite_out].data != 0, stop;
        for (int k = 0; k < r->train.noutputs; k++)
            tensor_free(&out[k]);
        if (sync_step(r, &loss, &stop, err)) {
            ct_failctx(err, "epoch %d, batch %zu", epoch, i);
            goto done;
        }
        if (r->finite_out >= 0) {
            scaler_update(&r->scaler, applied);
            r->skipped += !applied;
            skipped_here += !applied;
            if (scaler_exhausted(&r->scaler)) {
                ct_fail(err, "epoch %d, batch %zu: %ld steps skipped for non-finite gradients and the loss scale is "
                        "down to %g: no scale makes them finite; stopping (the last checkpoint is kept)",
                        epoch, i, skipped_here, r->scaler.scale);
                goto done;
            }
        } else if (!isfinite(loss)) {
            ct_fail(err, "epoch %d, batch %zu: the loss is %g; stopping (the last checkpoint is kept)", epoch, i,
                    loss);
            goto done;
        }
        if (isfinite(loss)) {
            r->loss_sum += loss;
            r->loss_count++;
        }
        sched_step_update(sched, ++num_updates);
        double avg = r->loss_count ? r->loss_sum / (double)r->loss_count : NAN;
        progress_update(&bar, i + 1);
        if (i % (size_t)r->a.log_interval == 0 || i + 1 == nb) {
            double el = cli_now() - t0;
            size_t done_here = i + 1 - first;
            char scale_note[64] = "";
            if (r->finite_out >= 0)
                snprintf(scale_note, sizeof scale_note, "  Scale: %g%s", r->scaler.scale,
                         applied ? "" : " (step skipped)");
            progress_log(&bar,
                         "Train: %d [%4zu/%zu (%3.0f%%)]  Loss: %#.4g (%#.4g)  Time: %.3fs, %7.2f/s  LR: %.3e  "
                         "Data: %.3f%s\n",
                         epoch, i + 1, nb, 100.0 * (double)(i + 1) / (double)nb, loss, avg, el / (double)done_here,
                         (double)(done_here * (size_t)r->a.batch_size * (size_t)r->world) / el, lr,
                         data_time / (double)done_here,
                         scale_note);
        }
        /* timm's recovery checkpoint: every --recovery-interval batches and at
         * the epoch's last; and on Ctrl-C */
        int every = r->a.recovery_interval && ((i + 1) % (size_t)r->a.recovery_interval == 0 || i + 1 == nb);
        if (r->saver && (every || stop)) {
            sync_scaler(r);
            if (saver_save_recovery(r->saver, &r->state, &r->info, epoch, (int)i, r->loss_sum, r->loss_count, err))
                goto done;
        }
        if (stop) {
            progress_end(&bar);
            printf("Interrupted at epoch %d, batch %zu of %zu", epoch, i + 1, nb);
            if (r->saver)
                printf("; resume with --resume %s/%s.safetensors\n", r->saver->dir, r->saver->recovery);
            else
                printf("; nothing saved (no --output)\n");
            rc = 1;
            goto done;
        }
    }
    *mean = r->loss_count ? r->loss_sum / (double)r->loss_count : NAN;
    if (skipped_here) /* the epoch's mean loss is over the applied steps only: say so */
        progress_log(&bar, "Train: %d: %ld of %zu steps skipped for a non-finite gradient (loss scale now %g); "
                     "the mean loss is over the other steps\n", epoch, skipped_here, nb - first, r->scaler.scale);
    rc = 0;
done:
    progress_end(&bar);
    free(out);
    return rc;
}

/* validate(): top-1, top-5 and cross-entropy over the whole split. 0, -1,
 * or CT_INTERRUPTED when Ctrl-C ended the eval graph's compile. */
static int validate(Run *r, CtState *st, const char *log_name, int epoch, double *loss, double *top1, double *top5,
                    CtErr *err)
{
    size_t nb = loader_epoch_batches(r->val_ld);
    EvalMeter meter = {0};
    double t0 = cli_now();
    Progress bar;
    progress_begin(&bar, log_name, nb, r->world > 1 ? 0 : -1);
    if (loader_start_epoch(r->val_ld, 0, err)) {
        progress_end(&bar);
        return -1;
    }
    for (size_t i = 0; i < nb; i++) {
        const Batch *bt = NULL;
        CtTensor logits;
        int got = loader_next(r->val_ld, &bt, err);
        if (got == 1) {
            eval_normalise(bt, r->vb, r->mean, r->std, r->x);
            CtTensor in = {{{4, {r->vb, 3, r->img, r->img}}, CT_F32}, r->x};
            int ran = r->be->run(&r->eval, st, &in, 1, &logits, err);
            got = ran ? ran : 1;
        }
        if (got != 1) {
            progress_end(&bar);
            return got < 0 ? got : ct_fail(err, "validation ended after %zu of %zu batches", i, nb);
        }
        eval_meter_add(&meter, logits.data, r->classes, bt->labels, bt->n);
        tensor_free(&logits);
        progress_update(&bar, i + 1);
    }
    progress_end(&bar);
    if (train_reduce_meter(r->dist, &meter, err)) /* timm's distributed validate: every rank's share */
        return -1;
    *loss = eval_loss(&meter);
    *top1 = eval_top1(&meter);
    *top5 = eval_top5(&meter);
    printf("%s: [%zu/%zu]  Time: %.3fs  Loss: %.4f  Acc@1: %.4f  Acc@5: %.4f\n", log_name, nb, nb, cli_now() - t0, *loss,
           *top1, *top5);
    (void)epoch;
    return 0;
}

static void run_free(Run *r)
{
    loader_destroy(r->train_ld);
    loader_destroy(r->val_ld);
    dataset_close(r->train_ds);
    dataset_close(r->val_ds);
    state_free(&r->state);
    if (r->ema_state.e)
        state_free(&r->ema_state);
    train_step_free(&r->ts);
    graph_free(&r->train);
    graph_free(&r->eval);
    free(r->x);
    free(r->soft);
}

/* The arguments as a JSON object, for the checkpoint's metadata. */
static char *args_json(const Args *a)
{
    cJSON *o = cJSON_CreateObject();
    CT_ASSERT(o != NULL);
    const char *str[][2] = {{"data_dir", a->data_dir}, {"dataset", a->dataset}, {"train_split", a->train_split},
                            {"val_split", a->val_split}, {"model", a->model}, {"opt", a->opt},
                            {"sched", a->sched}, {"device", a->device}, {"output", a->output},
                            {"resume", a->resume}, {"initial_checkpoint", a->initial_checkpoint},
                            {"eval_metric", a->eval_metric}, {"clip_mode", a->clip_mode}, {"mixup_mode", a->mixup_mode},
                            {"remode", a->remode}, {"config", a->config}, {"amp_dtype", a->amp_dtype}};
    for (size_t k = 0; k < sizeof str / sizeof *str; k++)
        if (str[k][1])
            cJSON_AddStringToObject(o, str[k][0], str[k][1]);
    const struct { const char *k; double v; } num[] = {
        {"num_classes", a->num_classes}, {"img_size", a->img_size}, {"batch_size", a->batch_size},
        {"validation_batch_size", a->val_batch_size}, {"epochs", a->epochs}, {"workers", a->workers},
        {"channels_last", a->channels_last}, {"no_resume_opt", a->no_resume_opt},
        {"checkpoint_hist", a->checkpoint_hist}, {"seed", a->seed}, {"clip_grad", a->clip_grad},
        {"model_ema", a->model_ema}, {"model_ema_decay", a->model_ema_decay},
        {"model_ema_warmup", a->model_ema_warmup}, {"lr", a->lr}, {"lr_base", a->lr_base},
        {"lr_base_size", a->lr_base_size}, {"momentum", a->momentum}, {"weight_decay", a->weight_decay},
        {"smoothing", a->smoothing}, {"warmup_lr", a->warmup_lr}, {"min_lr", a->min_lr},
        {"warmup_epochs", a->warmup_epochs}, {"drop", a->drop}, {"drop_path", a->drop_path},
        {"opt_eps", a->opt_eps}, {"sched_on_updates", a->sch.on_updates},
        {"decay_epochs", a->sch.decay_epochs}, {"decay_rate", a->sch.decay_rate},
        {"patience_epochs", a->sch.patience_epochs}, {"cooldown_epochs", a->sch.cooldown_epochs},
        {"warmup_prefix", a->sch.warmup_prefix}, {"lr_noise_pct", a->sch.noise_pct},
        {"lr_noise_std", a->sch.noise_std}, {"lr_cycle_mul", a->sch.cycle_mul},
        {"lr_cycle_decay", a->sch.cycle_decay}, {"lr_cycle_limit", a->sch.cycle_limit},
        {"lr_k_decay", a->sch.k_decay}, {"mixup", a->mixup}, {"cutmix", a->cutmix},
        {"mixup_prob", a->mixup_prob}, {"mixup_switch_prob", a->mixup_switch_prob},
        {"mixup_off_epoch", a->mixup_off_epoch}, {"reprob", a->reprob}, {"recount", a->recount},
        {"amp", a->amp}, {"bce_loss", a->bce_loss}, {"bce_target_thresh", a->bce_target_thresh},
        {"recovery_interval", a->recovery_interval}, {"start_epoch", a->start_epoch}};
    for (size_t k = 0; k < sizeof num / sizeof *num; k++)
        cJSON_AddNumberToObject(o, num[k].k, num[k].v);
    cJSON *ms = cJSON_AddArrayToObject(o, "decay_milestones");
    for (int k = 0; ms && k < a->sch.n_milestones; k++)
        cJSON_AddItemToArray(ms, cJSON_CreateNumber(a->sch.decay_milestones[k]));
    if (a->n_minmax) {
        cJSON *mm = cJSON_AddArrayToObject(o, "cutmix_minmax");
        for (int k = 0; mm && k < a->n_minmax; k++)
            cJSON_AddItemToArray(mm, cJSON_CreateNumber(a->cutmix_minmax[k]));
    }
    if (a->sch.n_noise) {
        cJSON *nz = cJSON_AddArrayToObject(o, "lr_noise");
        for (int k = 0; nz && k < a->sch.n_noise; k++)
            cJSON_AddItemToArray(nz, cJSON_CreateNumber(a->sch.noise[k]));
    }
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    CT_ASSERT(j != NULL);
    return j;
}

/* mkdir -p. */
static int make_dirs(const char *dir, CtErr *err)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return ct_fail(err, "--output %s: the path is too long", dir);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(p, 0755) && errno != EEXIST)
                return ct_fail(err, "cannot create %s: %s", p, strerror(errno));
            *c = '/';
        }
    if (mkdir(p, 0755) && errno != EEXIST)
        return ct_fail(err, "cannot create %s: %s", p, strerror(errno));
    return 0;
}

/* Whether dir holds nothing but "." and "..". */
static int dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

/* timm's get_outdir(..., inc=True): the run's folder is `want` when it is new
 * or empty, else the first of want-1, want-2, ... not there yet, so a run
 * never writes over an earlier one's files (a resumed run included). mkdir
 * claims the folder, so two runs started together get two. */
static int new_run_dir(const char *want, char *got, size_t n, CtErr *err)
{
    if (make_dirs(want, err))
        return -1;
    if (dir_empty(want)) {
        snprintf(got, n, "%s", want);
        return 0;
    }
    for (int k = 1; k < 10000; k++) {
        if (snprintf(got, n, "%s-%d", want, k) >= (int)n)
            return ct_fail(err, "--output %s: the path is too long", want);
        if (mkdir(got, 0755) == 0 || (errno == EEXIST && dir_empty(got)))
            return 0;
        if (errno != EEXIST)
            return ct_fail(err, "cannot create %s: %s", got, strerror(errno));
    }
    return ct_fail(err, "--output %s: %s-1 to %s-9999 are all taken; choose another --output", want, want, want);
}

/* The metric --eval-metric names. */
static double pick_metric(const Args *a, double loss, double top1, double top5)
{
    return !strcmp(a->eval_metric, "loss") ? loss : !strcmp(a->eval_metric, "top5") ? top5 : top1;
}

/* Every rank starts from rank 0's state (DDP's broadcast at wrapping); the
 * RNG counter of dropout and drop-path then moves apart per rank (timm
 * seeds rank r with seed + r), far enough that no two ranks draw alike. */
static int share_state(Run *r, CtErr *err)
{
    if (r->world == 1)
        return 0;
    if (dist_broadcast(r->dist, r->state.data, r->state.nbytes, 0, err))
        return ct_failctx(err, "sharing rank 0's state");
    int c = state_find(&r->state, "rng.counter");
    if (c >= 0)
        *(int64_t *)state_data(&r->state, c) += (int64_t)r->rank << 40;
    return 0;
}

/* The run: everything after the arguments. 0, or the exit status. */
static int train(const Args *args, CtDist *dist)
{
    Run r = {.a = *args, .dist = dist, .rank = dist_rank(dist), .world = dist_world_size(dist)};
    CtErr err = {{0}};
    char root[1000];
    FILE *summary = NULL;
    Saver saver = {0};
    Resumed res = {0};
    char *json = NULL;
    int rc = 1, start_epoch = 0;
    if (!(r.m = cli_model(prog, r.a.model)))
        return 2;
    char out_dir[1200], run_dir[1100];
    if (r.a.experiment) { /* timm: the run's folder is <output or ./output/train>/<experiment> */
        snprintf(out_dir, sizeof out_dir, "%s/%s", r.a.output ? r.a.output : "./output/train", r.a.experiment);
        r.a.output = out_dir;
    }
    if (r.a.lr_base_scale && strcmp(r.a.lr_base_scale, "sqrt") && strcmp(r.a.lr_base_scale, "linear")) {
        fprintf(stderr, "%s: --lr-base-scale is sqrt or linear, got '%s'\n", prog, r.a.lr_base_scale);
        return 2;
    }
    if (!(r.be = cli_backend(prog, r.a.device, &err))) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    r.amp = CT_F32;
    r.scaler = scaler_default();
    if (r.a.amp && !strcmp(r.a.amp_dtype, "float16"))
        r.amp = CT_F16;
    else if (r.a.amp && !strcmp(r.a.amp_dtype, "bfloat16"))
        r.amp = CT_BF16;
    else if (r.a.amp) {
        fprintf(stderr, "%s: --amp-dtype %s is not one of float16, bfloat16\n", prog, r.a.amp_dtype);
        return 2;
    }
    if (sched_kind_parse(r.a.sched) < 0) {
        fprintf(stderr, "%s: --sched %s is not one of cosine, tanh, step, multistep, plateau, poly, none\n", prog,
                r.a.sched);
        return 2;
    }
    if (strcmp(r.a.eval_metric, "top1") && strcmp(r.a.eval_metric, "top5") && strcmp(r.a.eval_metric, "loss")) {
        fprintf(stderr, "%s: --eval-metric %s is not one of top1, top5, loss\n", prog, r.a.eval_metric);
        return 2;
    }
    int decreasing = !strcmp(r.a.eval_metric, "loss");
    int bn_mode = !strcmp(r.a.dist_bn, "reduce") ? 1 : !strcmp(r.a.dist_bn, "broadcast") ? 0 : -1;
    if (bn_mode < 0 && *r.a.dist_bn && strcmp(r.a.dist_bn, "none")) {
        fprintf(stderr, "%s: --dist-bn %s is not one of reduce, broadcast, none\n", prog, r.a.dist_bn);
        return 2;
    }
    if (r.a.sync_bn && r.world > 1) /* train.py: sync BN makes the running statistics one already */
        bn_mode = -1;
    if (r.a.nproc_per_node && dist_launched() && r.a.nproc_per_node != r.world) {
        fprintf(stderr, "%s: --nproc-per-node %d, but the launcher started %d ranks\n", prog, r.a.nproc_per_node,
                r.world);
        return 2;
    }
    r.vb = r.a.val_batch_size > 0 ? r.a.val_batch_size : r.a.batch_size;
    if (r.a.lr < 0) { /* timm: lr = lr_base * global batch / lr_base_size, sqrt scaling for ada* and lamb */
        double ratio = (double)r.a.batch_size * r.world / r.a.lr_base_size;
        int use_sqrt = r.a.lr_base_scale ? !strcmp(r.a.lr_base_scale, "sqrt")
                                         : strstr(r.a.opt, "ada") || strstr(r.a.opt, "lamb");
        r.a.lr = r.a.lr_base * (use_sqrt ? sqrt(ratio) : ratio);
    }
    if (resolve_data(&r.a, root, sizeof root, &err) || open_data(&r, root, &err) || setup_augment(&r, &err) ||
        build_graphs(&r, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_run;
    }
    /* timm's create_scheduler_v2: the schedule fixes the epoch count (cooldown, a warmup prefix, cycles) */
    LrSched sched;
    r.a.sch.kind = (CtSchedKind)sched_kind_parse(r.a.sched);
    r.a.sch.epochs = r.a.epochs;
    r.a.sch.warmup_epochs = r.a.warmup_epochs;
    r.a.sch.warmup_lr = r.a.warmup_lr;
    r.a.sch.min_lr = r.a.min_lr;
    r.a.sch.noise_seed = r.a.seed;
    r.a.sch.plateau_min = decreasing;
    if (sched_init(&sched, &r.a.sch, r.a.lr, (int)loader_epoch_batches(r.train_ld), &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_run;
    }
    int num_epochs = sched.num_epochs;
    state_create(&r.state, &r.train);
    state_init(&r.state, (uint64_t)r.a.seed);
    if (r.a.initial_checkpoint && ckpt_load_weights(r.a.initial_checkpoint, &r.state, &err)) {
        fprintf(stderr, "%s: --initial-checkpoint %s\n", prog, err.msg);
        goto free_run;
    }
    ema_from_model(&r.state);
    if (r.a.resume) {
        if (r.rank == 0) { /* what runs killed there left behind, but the checkpoint itself */
            char dir[1100], keep[1100];
            const char *slash = strrchr(r.a.resume, '/');
            snprintf(dir, sizeof dir, "%.*s", !slash ? 1 : slash == r.a.resume ? 1 : (int)(slash - r.a.resume),
                     slash ? r.a.resume : ".");
            snprintf(keep, sizeof keep, "%s", slash ? slash + 1 : r.a.resume);
            char *ext = strstr(keep, ".");
            if (ext)
                *ext = 0;
            int fixed = ckpt_clean_dir(dir, keep);
            if (fixed)
                printf("Cleaned %s: %d files left by interrupted runs\n", dir, fixed);
        }
        if (ckpt_resume(r.a.resume, &r.state, r.m->name, !r.a.no_resume_opt, &res, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_run;
        }
        if (res.ema_missing) /* timm: an EMA the checkpoint lacks starts from its weights */
            ema_from_model(&r.state);
        start_epoch = res.epoch + 1;
        if (res.batches_done >= 0) { /* a recovery checkpoint: the rest of its epoch */
            start_epoch = res.epoch;
            r.first_batch = (size_t)res.batches_done;
            r.loss_sum = res.loss_sum;
            r.loss_count = res.loss_count;
        }
        if (res.has_scaler && r.amp == CT_F16) {
            r.scaler.scale = res.scale;
            r.scaler.growth_tracker = res.growth_tracker;
        }
        if (start_epoch >= num_epochs && r.a.start_epoch < 0) {
            fprintf(stderr, "%s: --resume %s: the checkpoint is of epoch %d, so --epochs %d leaves nothing to train\n",
                    prog, r.a.resume, res.epoch, r.a.epochs);
            goto free_run;
        }
    }
    if (r.a.start_epoch >= 0) { /* train.py: --start-epoch wins over the checkpoint's epoch */
        start_epoch = r.a.start_epoch;
        r.first_batch = 0;
        r.loss_sum = 0;
        r.loss_count = 0;
        if (start_epoch >= num_epochs) {
            fprintf(stderr, "%s: --start-epoch %d: the schedule has %d epochs\n", prog, start_epoch, num_epochs);
            goto free_run;
        }
    }
    if (share_state(&r, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_run;
    }
    int plateau_resumed = r.a.resume && r.a.start_epoch < 0 && r.a.sch.kind == CT_SCHED_PLATEAU;
    if (plateau_resumed && restore_sched(&sched, res.sched)) {
        fprintf(stderr, "%s: --resume %s: its plateau schedule state is missing or malformed\n", prog, r.a.resume);
        goto free_run;
    }
    if ((start_epoch > 0 || r.first_batch > 0) && !plateau_resumed) { /* train.py: the schedule moved on */
        if (r.a.sch.on_updates)
            sched_step_update(&sched, (long)start_epoch * (long)loader_epoch_batches(r.train_ld) +
                                          (long)r.first_batch);
        else
            sched_step(&sched, start_epoch);
    }
    int big = r.a.batch_size > r.vb ? r.a.batch_size : r.vb;
    r.x = malloc(sizeof *r.x * (size_t)big * 3 * (size_t)r.img * (size_t)r.img);
    if (mixup_active(&r.mix))
        r.soft = malloc(sizeof *r.soft * (size_t)r.a.batch_size * (size_t)r.classes);
    if (!r.x || (mixup_active(&r.mix) && !r.soft)) {
        fprintf(stderr, "%s: out of memory for a batch of %d images of %dx%d; lower --batch-size or --img-size\n",
                prog, big, r.img, r.img);
        goto free_run;
    }
    printf("Model %s created, param count: %lld\n", r.m->name, (long long)graph_param_count(&r.train));
    printf("Data: %s: %zu train, %zu validation images, %d classes, %dx%d; backend %s\n", root,
           dataset_len(r.train_ds), dataset_len(r.val_ds), r.classes, r.img, r.img, r.be->name);
    if (r.a.resume && r.first_batch)
        printf("Resumed from %s (epoch %d, %zu batches done%s); starting at epoch %d, batch %zu\n", r.a.resume,
               res.epoch, r.first_batch, r.a.no_resume_opt ? ", weights only" : "", start_epoch, r.first_batch);
    else if (r.a.resume)
        printf("Resumed from %s (epoch %d%s); starting at epoch %d\n", r.a.resume, res.epoch,
               r.a.no_resume_opt ? ", weights only" : "", start_epoch);
    if (r.world > 1) {
        int buckets = 0;
        for (int i = 0; i < r.train.nnodes; i++)
            buckets += r.train.nodes[i].op == CT_OP_allreduce_mean;
        printf("Distributed: %d ranks, global batch %d, gradients averaged in %d buckets of at most %g MiB\n",
               r.world, r.a.batch_size * r.world, buckets, r.a.bucket_cap_mb);
        int synced = 0;
        for (int i = 0; i < r.train.nnodes; i++)
            synced += r.train.nodes[i].op == CT_OP_batch_norm && r.train.nodes[i].iattr[1];
        if (r.a.sync_bn)
            printf("Synchronized BatchNorm: %d batch norms normalise by the statistics of the global batch\n",
                   synced);
    }
    if (r.amp != CT_F32)
        printf("AMP: %s autocast%s\n", r.amp == CT_F16 ? "float16" : "bfloat16",
               r.amp == CT_F16 ? ", dynamic loss scaling" : "");
    double best = NAN;
    int best_epoch = -1;
    /* Everything is validated: only now does the output folder appear. Rank
     * 0 alone writes it (summary.csv, checkpoints), as in timm. */
    if (r.a.output && r.rank == 0) {
        char path[1300];
        if (new_run_dir(r.a.output, run_dir, sizeof run_dir, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_run;
        }
        if (strcmp(run_dir, r.a.output))
            printf("Output: %s (%s holds an earlier run)\n", run_dir, r.a.output);
        else
            printf("Output: %s\n", run_dir);
        snprintf(path, sizeof path, "%s/summary.csv", run_dir);
        if (!(summary = fopen(path, "w"))) {
            fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
            goto free_run;
        }
        fprintf(summary, "epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n");
        saver_init(&saver, run_dir, r.a.checkpoint_hist, decreasing);
        r.saver = &saver;
        json = args_json(&r.a);
    }
    r.info = (CkptInfo){.model = r.m->name, .eval_metric = r.a.eval_metric, .args_json = json,
                        .num_classes = r.classes, .amp_scaler = r.amp == CT_F16 ? r.scaler_str : NULL,
                        .sched = r.sched_str};
    sync_sched(&r, &sched);
    catch_interrupts();
    if (num_epochs != r.a.epochs)
        printf("Scheduled epochs: %d (--epochs %d with the schedule's cooldown, warmup prefix or cycles)\n",
               num_epochs, r.a.epochs);
    for (int epoch = start_epoch; epoch < num_epochs; epoch++) {
        double el = 0, t1 = 0, t5 = 0, tl = NAN;
        int st = train_epoch(&r, epoch, epoch == start_epoch ? r.first_batch : 0, &sched, &tl, &err);
        double lr = sched_lr(&sched);
        r.loss_sum = 0;
        r.loss_count = 0;
        if (st == 1) {
            rc = 130;
            goto free_run;
        }
        /* timm's distribute_bn: the ranks' BN statistics made one before validating */
        if (st == 0 && bn_mode >= 0 && train_sync_bn(r.dist, &r.state, bn_mode, &err))
            st = -1;
        int vst = st < 0 ? -1 : validate(&r, &r.state, "Test", epoch, &el, &t1, &t5, &err);
        if (vst == CT_INTERRUPTED) {
            rc = stop_in_validation(&r, epoch, tl, &err);
            goto free_run;
        }
        if (vst) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_run;
        }
        if (r.a.model_ema) { /* train.py: the EMA's metrics replace the model's from here on */
            ema_view(&r);
            if (validate(&r, &r.ema_state, "Test (EMA)", epoch, &el, &t1, &t5, &err)) {
                fprintf(stderr, "%s: %s\n", prog, err.msg);
                goto free_run;
            }
        }
        if (summary) {
            fprintf(summary, "%d,%.6f,%.6f,%.4f,%.4f,%.6g\n", epoch, tl, el, t1, t5, lr);
            fflush(summary);
        }
        double metric = pick_metric(&r.a, el, t1, t5);
        sched_step_metric(&sched, epoch + 1, metric); /* the LR of the next epoch, saved with the checkpoint */
        sync_scaler(&r);
        sync_sched(&r, &sched);
        /* NaN outputs (a diverged model) make the eval loss NaN: whatever
         * top-1 they score by accident of ranking, the epoch is no candidate */
        double rank_by = isfinite(el) ? metric : NAN;
        if (!isfinite(rank_by))
            printf("Epoch %d: the eval %s is %g; it is not a candidate for model_best\n", epoch,
                   isfinite(el) ? r.a.eval_metric : "loss", isfinite(el) ? metric : el);
        if (summary && saver_save(&saver, &r.state, &r.info, epoch, rank_by, &err)) {
            fprintf(stderr, "%s: saving the checkpoint of epoch %d: %s\n", prog, epoch, err.msg);
            goto free_run;
        }
        if (isfinite(rank_by) && (best_epoch < 0 || (decreasing ? rank_by < best : rank_by > best))) {
            best = rank_by;
            best_epoch = epoch;
        }
        int stop = stop_agreed(&r, &err);
        if (stop < 0) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_run;
        }
        if (stop && epoch + 1 < num_epochs) { /* during validation: the epoch's checkpoint is the place */
            if (summary)
                printf("Interrupted after epoch %d; resume with --resume %s/last.safetensors\n", epoch, saver.dir);
            else
                printf("Interrupted after epoch %d; nothing saved (no --output)\n", epoch);
            rc = 130;
            goto free_run;
        }
    }
    if (r.skipped)
        printf("AMP: %ld steps skipped for a non-finite gradient\n", r.skipped);
    printf("*** Best metric: %.4f (epoch %d)\n", best, best_epoch);
    rc = 0;
free_run:
    if (summary)
        fclose(summary);
    saver_free(&saver);
    free(json);
    run_free(&r);
    return rc;
}

static void args_free(Args *a)
{
    train_config_free(a->cfg_words);
    free(a->cfg_argv);
}

/* Joins the ranks (a world of one when not launched as several), trains,
 * and leaves: together after a run every rank finished or stopped at the
 * same step; else at once, ending the other ranks (they may be waiting for
 * this one), with this rank's message out first. */
static int run_ranks(int argc, char **argv, const Args *a)
{
    CtErr err = {{0}};
    CtDist *dist;
    if (a->nproc_per_node > 1 && !dist_launched()) {
        train_launch(argc, argv, a->nproc_per_node, &err);
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (dist_init(&dist, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        if (dist)
            dist_abort(dist, 2);
        return 2;
    }
    if (dist_set_timeout(dist, a->dist_timeout, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        dist_abort(dist, 2);
    }
    static char rank_prog[64];
    if (dist_rank(dist) > 0) { /* timm: the primary rank alone logs */
        snprintf(rank_prog, sizeof rank_prog, "ctimm-train (rank %d)", dist_rank(dist));
        prog = rank_prog;
        if (!freopen("/dev/null", "w", stdout))
            fprintf(stderr, "%s: cannot quiet this rank's log: %s\n", prog, strerror(errno));
    } else if (dist_world_size(dist) > 1) {
        setvbuf(stdout, NULL, _IOLBF, 0); /* the launcher's pipe: lines as they come */
    }
    dist_install(dist);
    int rc = train(a, dist);
    if (rc != 0 && rc != 130 && dist_world_size(dist) > 1)
        dist_abort(dist, rc);
    dist_finish(dist);
    return rc;
}

int main(int argc, char **argv)
{
    Args a;
    int parsed = parse_args(argc, argv, &a);
    int rc = parsed ? (parsed > 0 ? 0 : 2) : run_ranks(argc, argv, &a);
    args_free(&a);
    return rc;
}
