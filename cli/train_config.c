/*
 * ctimm-train's -c/--config loader (cli/train_config.h).
 *
 * The text is first read as libyaml events, which bounds nesting, anchors
 * and documents before any node is built: libyaml's scanner takes time
 * quadratic in the nesting depth (a 200 KB line of '[' took over a minute to
 * refuse) and its loader quadratic in the number of anchors. Only then is it
 * loaded as a document, whose pairs become words.
 *
 * Values are read as train.py's yaml.safe_load reads them (YAML 1.1 plain
 * scalars: null, booleans, numbers) where they are compared with train.py's
 * defaults; the words themselves are the scalars' text, which ctimm-train's
 * own option parsing checks.
 */
#include "cli/train_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

/* An args.yaml is a few KB and nests once (a list value); these leave room
 * for hand-written files. */
#define MAX_BYTES (1 << 20)
#define MAX_DEPTH 16
#define MAX_ANCHORS 64

static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};

static int fail_at(CtErr *err, const yaml_parser_t *p)
{
    return ct_fail(err, "line %zu: %s", p->problem_mark.line + 1, p->problem ? p->problem : "not YAML");
}

/* Refuses what no config needs and libyaml takes superlinear time over:
 * deep nesting, many anchors; and a second document, which train.py's
 * yaml.safe_load refuses too. */
static int check_events(const char *text, size_t len, CtErr *err)
{
    yaml_parser_t p;
    CT_ASSERT(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = -1, depth = 0, anchors = 0, docs = 0;
    for (;;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            fail_at(err, &p);
            break;
        }
        yaml_event_type_t t = e.type;
        size_t line = e.start_mark.line + 1;
        int anchor = (t == YAML_SCALAR_EVENT && e.data.scalar.anchor) ||
                     (t == YAML_SEQUENCE_START_EVENT && e.data.sequence_start.anchor) ||
                     (t == YAML_MAPPING_START_EVENT && e.data.mapping_start.anchor);
        yaml_event_delete(&e);
        if (t == YAML_STREAM_END_EVENT) {
            rc = 0;
            break;
        }
        if ((t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) && ++depth > MAX_DEPTH) {
            ct_fail(err, "line %zu: nested deeper than %d levels", line, MAX_DEPTH);
            break;
        }
        depth -= t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT;
        if (anchor && ++anchors > MAX_ANCHORS) {
            ct_fail(err, "line %zu: more than %d anchors (&name)", line, MAX_ANCHORS);
            break;
        }
        if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
            ct_fail(err, "line %zu: a second YAML document (a config is one mapping)", line);
            break;
        }
    }
    yaml_parser_delete(&p);
    return rc;
}

/* A scalar's text, or NULL for another node or one holding a NUL ("\0"),
 * which no C string can carry. */
static const char *text_of(const yaml_node_t *v)
{
    if (v->type != YAML_SCALAR_NODE || strlen((const char *)v->data.scalar.value) != v->data.scalar.length)
        return NULL;
    return (const char *)v->data.scalar.value;
}

static int plain_in(const yaml_node_t *v, const char *const *words)
{
    const char *s = text_of(v);
    if (!s || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    for (int k = 0; words[k]; k++)
        if (!strcmp(s, words[k]))
            return 1;
    return 0;
}

static size_t n_items(const yaml_node_t *v)
{
    return v->type == YAML_SEQUENCE_NODE ? (size_t)(v->data.sequence.items.top - v->data.sequence.items.start)
                                         : (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
}

/* What a value is to train.py; UNSET is its None, False, '', [] and {}. */
typedef enum { V_UNSET, V_TRUE, V_NUM, V_STR, V_SEQ, V_MAP } VKind;

static VKind kind_of(const yaml_node_t *v, double *num)
{
    if (v->type != YAML_SCALAR_NODE)
        return !n_items(v) ? V_UNSET : v->type == YAML_SEQUENCE_NODE ? V_SEQ : V_MAP;
    const char *s = text_of(v);
    if (!s)
        return V_STR;
    if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return *s ? V_STR : V_UNSET;
    if (plain_in(v, nulls) || plain_in(v, no))
        return V_UNSET;
    if (plain_in(v, yes))
        return V_TRUE;
    char *end;
    *num = strtod(s, &end);
    return end != s && !*end ? V_NUM : V_STR;
}

/* Whether value v (of doc dv) is default d (of doc dd). The recursion
 * follows d, whose lists hold scalars, so cycles made with aliases in v
 * end at once. */
static int same_value(yaml_document_t *dv, const yaml_node_t *v, yaml_document_t *dd, const yaml_node_t *d)
{
    double x = 0, y = 0;
    VKind k = kind_of(v, &x);
    if (k != kind_of(d, &y))
        return 0;
    switch (k) {
    case V_UNSET:
    case V_TRUE: return 1;
    case V_NUM: return x == y;
    case V_STR: return text_of(v) && !strcmp(text_of(v), text_of(d));
    case V_SEQ:
        if (n_items(v) != n_items(d))
            return 0;
        for (size_t i = 0; i < n_items(v); i++)
            if (!same_value(dv, yaml_document_get_node(dv, v->data.sequence.items.start[i]), dd,
                            yaml_document_get_node(dd, d->data.sequence.items.start[i])))
                return 0;
        return 1;
    default: return 0; /* a non-empty map: train.py's map defaults are empty */
    }
}

static int at_default(yaml_document_t *doc, const yaml_node_t *v, const char *dflt)
{
    yaml_parser_t p;
    yaml_document_t dd;
    CT_ASSERT(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)dflt, strlen(dflt));
    CT_ASSERT(yaml_parser_load(&p, &dd)); /* the table's defaults are YAML */
    yaml_parser_delete(&p);
    int same = same_value(doc, v, &dd, yaml_document_get_root_node(&dd));
    yaml_document_delete(&dd);
    return same;
}

/* v as a message shows it: a scalar's text, a list's [a, b] of scalars. */
static void show(yaml_document_t *doc, const yaml_node_t *v, char *buf, size_t n)
{
    if (v->type == YAML_MAPPING_NODE) {
        snprintf(buf, n, "{...}");
        return;
    }
    if (v->type == YAML_SCALAR_NODE) {
        const char *s = text_of(v);
        snprintf(buf, n, "%s", !s ? "..." : *s || v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? s : "''");
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "[");
    for (size_t i = 0; i < n_items(v) && at < n; i++) {
        const char *s = text_of(yaml_document_get_node(doc, v->data.sequence.items.start[i]));
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "", s ? s : "...");
    }
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

/* Whether key is the dest of option flag: its name with '-' as '_'. */
static int is_dest_of(const char *key, const char *flag)
{
    for (; *key && *flag; key++, flag++)
        if (*key == '-' || (*key != *flag && !(*key == '_' && *flag == '-')))
            return 0;
    return !*key && !*flag;
}

static const struct option *find_option(const struct option *longs, const char *key)
{
    if (!strcmp(key, "data")) /* train.py's deprecated positional DIR */
        key = "data_dir";
    for (const struct option *o = longs; o->name; o++) {
        if (!is_dest_of(key, o->name) || !strcmp(o->name, "help") || !strcmp(o->name, "config"))
            continue;
        for (const struct option *q = longs; q < o; q++)
            if (q->val == o->val && q->flag == o->flag)
                return NULL; /* an alias */
        return o;
    }
    return NULL;
}

static char *dup_word(const char *prefix, const char *s)
{
    size_t n = strlen(prefix) + strlen(s) + 1;
    char *w = malloc(n);
    CT_ASSERT(w != NULL);
    snprintf(w, n, "%s%s", prefix, s);
    return w;
}

/* A list's numbers as one word, "0.5,0.5,0.5" (cli_number_list reads
 * commas); NULL when an item is not a scalar or holds a comma. */
static char *list_word(yaml_document_t *doc, const yaml_node_t *v)
{
    size_t len = 1;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        const char *s = text_of(yaml_document_get_node(doc, *it));
        if (!s || !*s || strchr(s, ','))
            return NULL;
        len += strlen(s) + 1;
    }
    char *w = malloc(len), *at = w;
    CT_ASSERT(w != NULL);
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
        at += sprintf(at, "%s%s", at == w ? "" : ",", text_of(yaml_document_get_node(doc, *it)));
    return w;
}

static int in_names(const char *const *names, const char *name)
{
    for (int k = 0; names && names[k]; k++)
        if (!strcmp(names[k], name))
            return 1;
    return 0;
}

/* A YAML value as the Python literal ParseKwargs would have read on the
 * command line (yaml.safe_dump wrote it from that literal): null, true and
 * false as None, True, False; a list of scalars as a tuple "(a, b)"; any
 * other scalar as it is. NULL for anything else. */
static char *literal_word(yaml_document_t *doc, const yaml_node_t *x)
{
    if (x->type == YAML_SEQUENCE_NODE) {
        size_t len = 3;
        for (yaml_node_item_t *it = x->data.sequence.items.start; it < x->data.sequence.items.top; it++) {
            const yaml_node_t *e = yaml_document_get_node(doc, *it);
            if (!e || !text_of(e) || !*text_of(e))
                return NULL;
            len += strlen(text_of(e)) + 2;
        }
        char *w = malloc(len), *at = w;
        CT_ASSERT(w != NULL);
        at += sprintf(at, "(");
        for (yaml_node_item_t *it = x->data.sequence.items.start; it < x->data.sequence.items.top; it++)
            at += sprintf(at, "%s%s", at == w + 1 ? "" : ", ", text_of(yaml_document_get_node(doc, *it)));
        sprintf(at, ")");
        return w;
    }
    const char *s = text_of(x);
    if (!s)
        return NULL;
    s = plain_in(x, nulls) ? "None" : plain_in(x, yes) ? "True" : plain_in(x, no) ? "False" : s;
    char *w = malloc(strlen(s) + 1);
    CT_ASSERT(w != NULL);
    return strcpy(w, s);
}

/* A mapping's pairs as KEY=VALUE words at w[*n]; values scalars or lists of them. */
static int map_words(yaml_document_t *doc, const char *key, const yaml_node_t *v, char **w, int *n, CtErr *err)
{
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
        const char *k = text_of(yaml_document_get_node(doc, pr->key));
        char *s = literal_word(doc, yaml_document_get_node(doc, pr->value));
        if (!k || !*k || strchr(k, '=') || !s) {
            free(s);
            return ct_fail(err, "'%s' expects a mapping of names to values or lists of them", key);
        }
        char *word = malloc(strlen(k) + strlen(s) + 2);
        CT_ASSERT(word != NULL);
        sprintf(word, "%s=%s", k, s);
        free(s);
        w[(*n)++] = word;
    }
    return 0;
}

/* Appends the words of key: v for option o to w at *n. */
static int option_words(const TrainConfigSpec *spec, yaml_document_t *doc, const char *key, const yaml_node_t *v,
                        const struct option *o, char **w, int *n, CtErr *err)
{
    if (o->has_arg == no_argument) {
        if (plain_in(v, yes))
            w[(*n)++] = dup_word("--", o->name);
        else if (!plain_in(v, no) && !plain_in(v, nulls))
            return ct_fail(err, "'%s' expects true or false", key);
        return 0;
    }
    if (plain_in(v, nulls) || (v->type != YAML_SCALAR_NODE && !n_items(v)))
        return 0; /* None, [], {}: the default */
    if (v->type == YAML_MAPPING_NODE && in_names(spec->maps, o->name)) {
        w[(*n)++] = dup_word("--", o->name);
        return map_words(doc, key, v, w, n, err);
    }
    if (v->type == YAML_SEQUENCE_NODE && in_names(spec->lists, o->name)) {
        char *list = list_word(doc, v);
        if (!list)
            return ct_fail(err, "'%s' expects a list of numbers", key);
        w[(*n)++] = dup_word("--", o->name);
        w[(*n)++] = list;
        return 0;
    }
    const char *s = text_of(v);
    if (!s)
        return ct_fail(err, v->type == YAML_SCALAR_NODE ? "'%s' holds a NUL character" : "'%s' expects a single value",
                       key);
    if (o->has_arg == optional_argument) { /* getopt takes an optional value only as --k=VALUE */
        char *eq = dup_word("--", o->name);
        size_t len = strlen(eq);
        char *word = malloc(len + strlen(s) + 2);
        CT_ASSERT(word != NULL);
        sprintf(word, "%s=%s", eq, s);
        free(eq);
        w[(*n)++] = word;
        return 0;
    }
    w[(*n)++] = dup_word("--", o->name);
    w[(*n)++] = dup_word("", s);
    return 0;
}

static const TrainPyArg *find_unimplemented(const TrainPyArg *u, const char *key)
{
    for (; u->flag; u++)
        if (is_dest_of(key, u->flag))
            return u;
    return NULL;
}

static char **words_of(const TrainConfigSpec *spec, yaml_document_t *doc, int *n, CtErr *err)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        ct_fail(err, "not a mapping of train.py argument names to values");
        return NULL;
    }
    size_t cap = 1; /* a key gives at most two words, a mapping one more per pair */
    for (yaml_node_pair_t *pr = root ? root->data.mapping.pairs.start : NULL; pr && pr < root->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *v = yaml_document_get_node(doc, pr->value);
        cap += 2 + (v->type == YAML_MAPPING_NODE ? n_items(v) : 0);
    }
    char **w = calloc(cap, sizeof *w);
    CT_ASSERT(w != NULL);
    for (yaml_node_pair_t *pr = root ? root->data.mapping.pairs.start : NULL; pr && pr < root->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key), *v = yaml_document_get_node(doc, pr->value);
        const char *key = text_of(k);
        if (!key) {
            ct_fail(err, "line %zu: a key that is not a name", k->start_mark.line + 1);
            goto free_words;
        }
        const TrainPyArg *u = find_unimplemented(spec->unimplemented, key);
        if (u && !at_default(doc, v, u->dflt)) {
            char shown[160];
            show(doc, v, shown, sizeof shown);
            ct_fail(err, "'%s: %s' (--%s) is not implemented in ctimm-train (%s); train.py's default is %s", key,
                    shown, u->flag, u->why, u->dflt);
            goto free_words;
        }
        if (u)
            continue;
        const struct option *o = find_option(spec->longs, key);
        if (!o) {
            ct_fail(err, "unknown key '%s' (not a train.py argument ctimm-train knows)", key);
            goto free_words;
        }
        if (option_words(spec, doc, key, v, o, w, n, err))
            goto free_words;
    }
    return w;
free_words:
    train_config_free(w);
    *n = 0;
    return NULL;
}

char **train_config_words(const char *text, size_t len, const TrainConfigSpec *spec, int *n, CtErr *err)
{
    *n = 0;
    if (len > MAX_BYTES) {
        ct_fail(err, "larger than %d bytes (a train.py args.yaml is a few KB)", MAX_BYTES);
        return NULL;
    }
    if (check_events(text, len, err))
        return NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    CT_ASSERT(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) { /* an undefined alias, a duplicate anchor */
        fail_at(err, &p);
        yaml_parser_delete(&p);
        return NULL;
    }
    yaml_parser_delete(&p);
    char **w = words_of(spec, &doc, n, err);
    yaml_document_delete(&doc);
    return w;
}

char **train_config_read(const char *path, const TrainConfigSpec *spec, int *n, CtErr *err)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        ct_fail(err, "%s", strerror(errno));
        return NULL;
    }
    char *text = malloc(MAX_BYTES + 1);
    CT_ASSERT(text != NULL);
    size_t len = fread(text, 1, MAX_BYTES + 1, f); /* one byte more than allowed: a larger file is refused */
    char **w = NULL;
    if (ferror(f))
        ct_fail(err, "cannot read: %s", strerror(errno));
    else
        w = train_config_words(text, len, spec, n, err);
    free(text);
    fclose(f);
    return w;
}

void train_config_free(char **words)
{
    for (int i = 0; words && words[i]; i++)
        free(words[i]);
    free(words);
}
