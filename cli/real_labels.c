#include "cli/real_labels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "train/meter.h"

static char *read_file(const char *path, CtErr *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ct_fail(err, "--real-labels %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0, k;
    do {
        if (n + 65536 > cap) {
            cap = 2 * cap + 65536;
            buf = realloc(buf, cap + 1);
            CT_ASSERT(buf != NULL);
        }
        k = fread(buf + n, 1, 65536, f);
        n += k;
    } while (k > 0);
    fclose(f);
    buf[n] = 0;
    return buf;
}

int real_labels_open(RealLabels *r, const char *path, const Dataset *ds, CtErr *err)
{
    memset(r, 0, sizeof *r);
    char *text = read_file(path, err);
    if (!text)
        return -1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    int rc = -1;
    if (!cJSON_IsArray(j)) {
        ct_fail(err, "--real-labels %s: not a JSON list of label lists", path);
        goto done;
    }
    int entries = cJSON_GetArraySize(j);
    r->nsamples = dataset_len(ds);
    if ((size_t)entries != r->nsamples) {
        ct_fail(err, "--real-labels %s has %d entries but the split has %zu images", path, entries, r->nsamples);
        goto done;
    }
    r->labels = calloc(r->nsamples + 1, sizeof *r->labels);
    r->n = calloc(r->nsamples + 1, sizeof *r->n);
    CT_ASSERT(r->labels && r->n);
    for (size_t i = 0; i < r->nsamples; i++) {
        char name[1024];
        dataset_sample_name(ds, i, name, sizeof name);
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        const char *colon = strrchr(base, ':'); /* "archive.tar:member" */
        base = colon ? colon + 1 : base;
        unsigned long num;
        int used = 0;
        if (sscanf(base, "ILSVRC2012_val_%8lu.JPEG%n", &num, &used) != 1 || base[used] || num < 1 ||
            num > (unsigned long)entries) {
            ct_fail(err, "--real-labels: '%s' is not an ILSVRC2012_val_<1..%d>.JPEG file the labels cover", base,
                    entries);
            goto done;
        }
        cJSON *list = cJSON_GetArrayItem(j, (int)num - 1);
        int k = cJSON_GetArraySize(list);
        r->labels[i] = malloc(sizeof **r->labels * (size_t)(k + 1));
        CT_ASSERT(r->labels[i] != NULL);
        for (cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next) {
            if (!cJSON_IsNumber(e)) {
                ct_fail(err, "--real-labels %s: entry %lu is not a list of class indices", path, num - 1);
                goto done;
            }
            r->labels[i][r->n[i]++] = e->valueint;
        }
    }
    rc = 0;
done:
    cJSON_Delete(j);
    if (rc)
        real_labels_free(r);
    return rc;
}

void real_labels_free(RealLabels *r)
{
    for (size_t i = 0; r->labels && i < r->nsamples; i++)
        free(r->labels[i]);
    free(r->labels);
    free(r->n);
    memset(r, 0, sizeof *r);
}

void real_labels_add(RealLabels *r, size_t sample, const float *row, int C)
{
    if (sample >= r->nsamples || r->n[sample] == 0)
        return;
    int best = C; /* the best rank among the valid classes */
    for (int k = 0; k < r->n[sample]; k++) {
        int c = r->labels[sample][k];
        if (c >= 0 && c < C) {
            int rank = eval_rank(row, C, c);
            best = rank < best ? rank : best;
        }
    }
    r->hit1 += best < 1;
    r->hit5 += best < 5;
    r->counted++;
}

double real_labels_top1(const RealLabels *r) { return r->counted ? 100 * r->hit1 / r->counted : NAN; }
double real_labels_top5(const RealLabels *r) { return r->counted ? 100 * r->hit5 / r->counted : NAN; }
