/*
 * ImageNet ReaL labels for ctimm-validate --real-labels, as timm's
 * RealLabelsImagenet reads them: a JSON list, entry i the (possibly empty)
 * list of valid classes of ILSVRC2012_val_<i+1, 8 digits>.JPEG. An image
 * whose list is empty is left out of the accuracy; one is correct at k when
 * any of its top-k predictions is in its list.
 */
#ifndef CTIMM_CLI_REAL_LABELS_H
#define CTIMM_CLI_REAL_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"
#include "runtime/data/dataset.h"

typedef struct RealLabels {
    int **labels; /* per dataset sample: its valid classes */
    int *n;       /* and how many */
    size_t nsamples;
    double hit1, hit5, counted;
} RealLabels;

/* Reads path and matches it to ds's samples by file name (every sample must
 * be an ILSVRC2012_val_*.JPEG the file covers, and the counts equal, as
 * timm asserts). */
int real_labels_open(RealLabels *r, const char *path, const Dataset *ds, CtErr *err);
void real_labels_free(RealLabels *r);
/* Adds the logits row [C] of dataset sample `sample`. */
void real_labels_add(RealLabels *r, size_t sample, const float *row, int C);
/* Top-1 and top-5 in percent over the images with labels. */
double real_labels_top1(const RealLabels *r);
double real_labels_top5(const RealLabels *r);

#endif
