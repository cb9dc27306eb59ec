/* Contract: layer_group_ids reproduces group_with_matcher's numbering: sort
 * keys as Python's tuples of floats, equal keys one layer, LG_MATCH_PREV
 * keys merged into the layer before. */
#include "models/layer_groups.h"

#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_MAX = 12 };

typedef struct Key {
    double v[KEY_MAX];
    int n;
} Key;

/* Python's tuple order: element by element, a prefix first. */
static int key_cmp(const Key *a, const Key *b)
{
    for (int i = 0; i < a->n && i < b->n; i++)
        if (a->v[i] != b->v[i])
            return a->v[i] < b->v[i] ? -1 : 1;
    return a->n - b->n;
}

typedef struct Item {
    Key key;
    int name;
} Item;

static int by_key(const void *a, const void *b)
{
    const Item *x = a, *y = b;
    int c = key_cmp(&x->key, &y->key);
    return c ? c : x->name - y->name;
}

/* The first rule matching at the start of name: (group, captures..., suffix);
 * (inf) when none does. regexec reports the leftmost match, so it starts at
 * 0 exactly when re.match would match. */
static int name_key(const GroupRule *rules, const regex_t *re, const char *name, Key *k, CtErr *err)
{
    for (int r = 0; rules[r].regex; r++) {
        regmatch_t m[KEY_MAX];
        if (regexec(&re[r], name, KEY_MAX, m, 0) || m[0].rm_so != 0)
            continue;
        k->n = 0;
        k->v[k->n++] = rules[r].group;
        for (size_t c = 1; c <= re[r].re_nsub; c++) {
            if (m[c].rm_so < 0)
                return ct_fail(err, "layer groups: group %zu of /%s/ is empty for %s", c, rules[r].regex, name);
            k->v[k->n++] = strtod(name + m[c].rm_so, NULL);
        }
        if (rules[r].suffix != LG_NO_SUFFIX)
            k->v[k->n++] = rules[r].suffix;
        return 0;
    }
    *k = (Key){{INFINITY}, 1};
    return 0;
}

int layer_group_ids(const GroupRule *rules, const char *const *names, int n, int *ids, int *nlayers, CtErr *err)
{
    int nrules = 0, rc = -1;
    while (rules[nrules].regex)
        nrules++;
    regex_t *re = calloc((size_t)nrules + 1, sizeof *re);
    Item *items = malloc(sizeof *items * ((size_t)n + 1));
    CT_ASSERT(re && items);
    int compiled = 0;
    for (; compiled < nrules; compiled++) {
        CT_ASSERT(regcomp(&re[compiled], rules[compiled].regex, REG_EXTENDED) == 0);
        CT_ASSERT(re[compiled].re_nsub + 2 <= KEY_MAX);
    }
    for (int k = 0; k < n; k++) {
        if (name_key(rules, re, names[k], &items[k].key, err))
            goto free_all;
        items[k].name = k;
    }
    qsort(items, (size_t)n, sizeof *items, by_key);
    int lid = -1;
    for (int i = 0; i < n; i++) {
        const Key *k = &items[i].key;
        int same = i > 0 && key_cmp(k, &items[i - 1].key) == 0;
        if (!same && (lid < 0 || k->v[k->n - 1] != LG_MATCH_PREV))
            lid++;
        ids[items[i].name] = lid;
    }
    *nlayers = lid + 1;
    rc = 0;
free_all:
    for (int r = 0; r < compiled; r++)
        regfree(&re[r]);
    free(re);
    free(items);
    return rc;
}

void layer_decay_scales(const int *ids, int n, int nlayers, double decay, double min_scale, double *scale)
{
    for (int k = 0; k < n; k++)
        scale[k] = fmax(min_scale, pow(decay, nlayers - 1 - ids[k]));
}

void layer_auto_group_ids(const char *const *names, int n, const char *head_prefix, int *ids, int *nlayers)
{
    size_t hp = head_prefix ? strlen(head_prefix) : 0;
    int trunk = 0;
    for (int k = 0; k < n; k++)
        if (hp && strncmp(names[k], head_prefix, hp) != 0)
            ids[k] = trunk++ / LG_AUTO_PER_GROUP;
    int head = (trunk + LG_AUTO_PER_GROUP - 1) / LG_AUTO_PER_GROUP;
    for (int k = 0; k < n; k++)
        if (!hp || strncmp(names[k], head_prefix, hp) == 0)
            ids[k] = head;
    *nlayers = head + 1;
}

int layer_decay_params(const Graph *g, const GroupRule *rules, const char *head_prefix, double decay,
                       double min_scale, int *ids, double *scale, int *nparams, int *nlayers, CtErr *err)
{
    const char **names = calloc((size_t)g->nstate + 1, sizeof *names);
    CT_ASSERT(names != NULL);
    int n = 0;
    for (int k = 0; k < g->nstate; k++)
        if (g->values[g->state[k]].role == CT_ROLE_PARAM)
            names[n++] = g->values[g->state[k]].name;
    int rc = 0;
    if (rules)
        rc = layer_group_ids(rules, names, n, ids, nlayers, err);
    else
        layer_auto_group_ids(names, n, head_prefix, ids, nlayers);
    if (rc == 0)
        layer_decay_scales(ids, n, *nlayers, decay, min_scale, scale);
    *nparams = n;
    free(names);
    return rc;
}

int layer_block_regexes(const GroupRule *rules, const char **out, int max)
{
    int n = 0;
    for (int k = 0; rules && rules[k].regex; k++)
        if (rules[k].group == 1 && rules[k].suffix == LG_NO_SUFFIX && n < max)
            out[n++] = rules[k].regex;
    return n;
}
