/*
 * ctimm-train's -c/--config loader (cli/train_config.h): the words of small
 * configs, every refusal by name, the bounds on hostile YAML (deep nesting,
 * anchors, documents, size), and timm's own args.yaml files
 * (tests/data/timm_args*.yaml, made by tools/make_args_yaml.py from
 * train.py) against the real table of train.py's arguments ctimm-train lacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_config.h"
#include "tests/check.h"

static const struct option longs[] = {
    {"batch-size", 1, 0, 'b'}, {"mean", 1, 0, 'M'}, {"scale", 1, 0, 'S'}, {"amp", 0, 0, 'a'},
    {"decay-rate", 1, 0, 'r'}, {"dr", 1, 0, 'r'}, {"data-dir", 1, 0, 'D'}, {"model", 1, 0, 'm'},
    {"help", 0, 0, 'h'},       {"config", 1, 0, 'c'}, {"torchcompile", 2, 0, 't'}, {"model-kwargs", 1, 0, 'k'},
    {"opt-kwargs", 1, 0, 'O'},
    {0, 0, 0, 0}};
static const char *const lists[] = {"mean", "scale", NULL}, *const maps[] = {"model-kwargs", "opt-kwargs", NULL};
static const TrainConfigSpec spec = {longs, lists, train_py_unimplemented, maps};

/* The words of text, joined by '|' ("" for none), or "ERR: <message>". */
static const char *words(const TrainConfigSpec *sp, const char *text, size_t len)
{
    static char out[8192];
    CtErr err = {{0}};
    int n = -1;
    char **w = train_config_words(text, len, sp, &n, &err);
    if (!w) {
        CHECKF(n == 0 && err.msg[0], "a refusal without a message: %s", text);
        snprintf(out, sizeof out, "ERR: %s", err.msg);
        return out;
    }
    out[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "|" : "", w[i]);
    CHECK(w[n] == NULL);
    train_config_free(w);
    return out;
}

#define EXPECT(text, want)                                                                 \
    do {                                                                                   \
        const char *got_ = words(&spec, text, strlen(text));                               \
        CHECKF(!strcmp(got_, want), "%s\n  gives  %s\n  wanted %s", text, got_, want);     \
    } while (0)
#define REFUSED(text, part)                                                                \
    do {                                                                                   \
        const char *got_ = words(&spec, text, strlen(text));                               \
        CHECKF(!strncmp(got_, "ERR: ", 5) && strstr(got_, part), "%s\n  gives  %s\n  wanted ERR: ...%s", \
               text, got_, part);                                                          \
    } while (0)

static void test_words(void)
{
    EXPECT("batch_size: 32\nmean: [0.5, 0.5, 0.5]\namp: true\nmodel: x\n",
           "--batch-size|32|--mean|0.5,0.5,0.5|--amp|--model|x");
    EXPECT("scale:\n- 0.08\n- 1.0\n", "--scale|0.08,1.0"); /* safe_dump's block list */
    EXPECT("batch_size: null\namp: false\nmean: []\nscale:\nmodel: ~\n", "");
    EXPECT("data: /d\n", "--data-dir|/d");         /* train.py's positional DIR */
    EXPECT("model: ''\n", "--model|");              /* '' reaches the option: train.py's "not given" */
    EXPECT("decay_rate: 0.5\n", "--decay-rate|0.5");
    EXPECT("", "");
    EXPECT("# only a comment\n", "");
    EXPECT("a: &x 3\nbatch_size: *x\n", "ERR: unknown key 'a' (not a train.py argument ctimm-train knows)");
    EXPECT("batch_size: &x 3\nmodel: *x\n", "--batch-size|3|--model|3");
    /* an optional value reaches getopt only as one word */
    EXPECT("torchcompile: inductor\n", "--torchcompile=inductor");
    EXPECT("torchcompile: null\n", "");
}

static void test_refusals(void)
{
    REFUSED("batch_sise: 3\n", "unknown key 'batch_sise'");
    REFUSED("batch-size: 3\n", "unknown key 'batch-size'"); /* a dest never has a dash */
    REFUSED("dr: 0.5\n", "unknown key 'dr'");               /* an alias is not a dest */
    REFUSED("help: true\n", "unknown key 'help'");
    REFUSED("config: x.yaml\n", "unknown key 'config'");
    REFUSED("amp: 3\n", "'amp' expects true or false");
    REFUSED("batch_size: [1, 2]\n", "'batch_size' expects a single value");
    REFUSED("batch_size: {a: 1}\n", "'batch_size' expects a single value");
    REFUSED("mean: [[1]]\n", "'mean' expects a list of numbers");
    REFUSED("mean: ['1,2']\n", "'mean' expects a list of numbers");
    REFUSED("model: \"a\\0b\"\n", "'model' holds a NUL character");
    REFUSED("\"a\\0b\": 1\n", "line 1: a key that is not a name");
    REFUSED("[a]: 1\n", "line 1: a key that is not a name");
    REFUSED("[1, 2]\n", "not a mapping of train.py argument names to values");
    REFUSED("batch_size: [\n", "line 2:");
    REFUSED("batch_size: *nowhere\n", "line 1:");
    REFUSED("batch_size: 1\n---\nmodel: x\n", "line 2: a second YAML document");
}

/* train.py's arguments ctimm-train lacks: at their defaults they load,
 * otherwise they are refused naming key, value and flag. */
static void test_unimplemented(void)
{
    const char *const fine[] = {
        "naflex_max_seq_len: 576\n", "naflex_max_seq_len: 576.0\n", "kd_temperature: 4\n", "save_images: false\n",
        "save_images: null\n",
        "wandb_tags: []\n", "wandb_tags: null\n", "model_kwargs: {}\n", "local_rank: 0\n",
        "naflex_train_seq_lens: [128, 256, 576, 784, 1024]\n", "naflex_train_seq_lens: [128.0, 256, 576, 784, 1024]\n",
        "kd_distill_type: logit\n", "worker_seeding: all\n", "train_size_schedule: constant\n",
        "amp_impl: native\n", "apex_amp: false\n", /* train.py's of timm 0.9 */
    };
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++)
        EXPECT(fine[i], "");
    REFUSED("train_size_schedule: linear\n", "'train_size_schedule: linear' (--train-size-schedule) is not "
                                              "implemented in ctimm-train (variable-resolution training is not built "
                                              "yet); train.py's default is constant");
    REFUSED("log_wandb: true\n", "'log_wandb: true' (--log-wandb) is not implemented");
    REFUSED("kd_distill_type: 'logits'\n", "'kd_distill_type: logits'");
    REFUSED("wandb_tags: [a, b]\n", "'wandb_tags: [a, b]' (--wandb-tags)");
    EXPECT("model_kwargs: {img_size: 160, a: x}\n", "--model-kwargs|img_size=160|a=x"); /* ParseKwargs' words */
    EXPECT("model_kwargs: {}\n", "");
    EXPECT("model_kwargs: {a: [1, 2]}\n", "--model-kwargs|a=(1, 2)");
    REFUSED("model_kwargs: {a: {b: 1}}\n", "'model_kwargs' expects a mapping of names to values or lists of them");
    /* yaml.safe_dump's form of train.py's --opt-kwargs betas='(0.95, 0.98)' clip_exp=None decoupled=True eps=1e-3 */
    EXPECT("opt_kwargs:\n  betas:\n  - 0.95\n  - 0.98\n  clip_exp: null\n  decoupled: true\n  eps: 0.001\n",
           "--opt-kwargs|betas=(0.95, 0.98)|clip_exp=None|decoupled=True|eps=0.001");
    EXPECT("opt_kwargs: {}\n", "");
    REFUSED("naflex_train_seq_lens: [128]\n", "'naflex_train_seq_lens: [128]'");
    REFUSED("local_rank: 1\n", "'local_rank: 1' (--local_rank)");
    REFUSED("amp_impl: apex\n", "'amp_impl: apex' (--amp-impl)");
    REFUSED("naflex_max_seq_len: '576'\n", "'naflex_max_seq_len: 576'"); /* a string is not train.py's 576 */
    /* an alias cycle compares and shows without following it */
    REFUSED("naflex_train_seq_lens: &x [*x, 256, 576, 784, 1024]\n", "'naflex_train_seq_lens: [..., 256");
}

/* "mean: " and a list nested k deep, in buf. */
static void nested_list(char *buf, int k)
{
    int at = sprintf(buf, "mean: ");
    for (int i = 0; i < k; i++)
        buf[at++] = '[';
    for (int i = 0; i < k; i++)
        buf[at++] = ']';
    sprintf(buf + at, "\n");
}

/* The bounds that keep hostile YAML linear: each refused by name, the deep
 * one fast (ctest's TIMEOUT: libyaml alone took over a minute on it). */
static void test_bounds(void)
{
    size_t n = 200000;
    char *deep = malloc(n);
    CT_ASSERT(deep != NULL);
    memset(deep, '[', n);
    const char *got = words(&spec, deep, n);
    CHECKF(strstr(got, "line 1: nested deeper than 16 levels"), "%s", got);
    /* the root mapping is the first level */
    nested_list(deep, 15);
    CHECKF(strstr(words(&spec, deep, strlen(deep)), "'mean' expects a list of numbers"), "16 levels are allowed");
    nested_list(deep, 16);
    CHECKF(strstr(words(&spec, deep, strlen(deep)), "line 1: nested deeper than 16 levels"), "17 are not");
    size_t at = 0;
    for (int k = 0; k < 65; k++)
        at += (size_t)sprintf(deep + at, "k%d: &a%d 1\n", k, k);
    CHECKF(strstr(words(&spec, deep, at), "line 65: more than 64 anchors"), "anchors");
    free(deep);
    size_t big = (1 << 20) + 1;
    char *huge = malloc(big);
    CT_ASSERT(huge != NULL);
    memset(huge, '\n', big);
    CHECKF(strstr(words(&spec, huge, big), "larger than 1048576 bytes"), "size");
    CHECKF(!strcmp(words(&spec, huge, big - 1), ""), "1 MiB of blank lines is fine");
    free(huge);
}

/* An args.yaml of train.py's, with ctimm-train taking every key that the
 * table of unimplemented arguments lacks (its flags and lists as the file
 * shows them): the table's defaults must be train.py's. */
static const char *timm_args(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", test_data_dir(), name);
    char *text = test_read_text(path);
    CHECKF(text && *text, "cannot read %s", path);
    if (!text)
        return "";
    static struct option opts[256];
    static char names[256][64];
    static const char *list_names[256];
    int no = 0, nl = 0;
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char *colon = strchr(line, ':');
        if (*line == ' ' || *line == '-' || !colon || no == 255)
            continue;
        snprintf(names[no], sizeof names[no], "%.*s", (int)(colon - line), line);
        for (char *c = names[no]; *c; c++)
            *c = *c == '_' ? '-' : *c;
        int flag = !strncmp(colon, ": true\n", 7) || !strncmp(colon, ": false\n", 8);
        if (colon[1] == '\n')
            list_names[nl++] = names[no];
        opts[no] = (struct option){names[no], flag ? no_argument : required_argument, 0, 1000 + no};
        no++;
    }
    opts[no] = (struct option){0, 0, 0, 0};
    list_names[nl] = NULL;
    const TrainConfigSpec all = {opts, list_names, train_py_unimplemented, NULL};
    const char *got = words(&all, text, strlen(text));
    free(text);
    return got;
}

static void test_timm_args(void)
{
    const char *got = timm_args("timm_args.yaml");
    CHECKF(strncmp(got, "ERR", 3), "%s", got);
    const char *want[] = {"|--decay-milestones|90,180,270|", "|--scale|0.08,1.0|", "|--ratio|0.75,1.3333333333333333|",
                          "|--dataset||", "|--model|resnet50|", "|--warmup-lr|1.0e-05|"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(strstr(got, want[i]), "%s lacks %s", got, want[i]);
    CHECKF(!strstr(got, "--mean") && !strstr(got, "|--amp|") && !strstr(got, "--pretrained"), "%s", got);
    got = timm_args("timm_args_lists.yaml");
    const char *lists_want[] = {"|--mean|0.5,0.5,0.5|", "|--std|0.25,0.25,0.25|", "|--input-size|3,32,32|",
                                "|--opt-betas|0.8,0.99|", "|--lr-noise|0.4,0.9|", "|--cutmix-minmax|0.3,0.7|",
                                "|--scale|0.5,1.0|", "|--ratio|0.8,1.25|", "|--decay-milestones|10,20|"};
    for (size_t i = 0; i < sizeof lists_want / sizeof *lists_want; i++)
        CHECKF(strstr(got, lists_want[i]), "%s lacks %s", got, lists_want[i]);
}

int main(void)
{
    test_words();
    test_refusals();
    test_unimplemented();
    test_bounds();
    test_timm_args();
    return check_done("test_train_config");
}
