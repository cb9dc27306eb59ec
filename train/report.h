/*
 * How the trainer reports: timm's log lines, one call each, and a progress
 * hook per pass over batches (a training epoch, a validation). The caller
 * decides where they go (ctimm-train: stdout and a progress bar on a
 * terminal; tests: nowhere, or a buffer). Any hook may be NULL.
 */
#ifndef CTIMM_TRAIN_REPORT_H
#define CTIMM_TRAIN_REPORT_H

#include <stddef.h>

typedef struct TrainReport {
    void *ctx;
    /* One line, ending in '\n'. Between pass_begin and pass_end it is a
     * line logged while the pass's progress is shown. */
    void (*log)(void *ctx, const char *line);
    /* A pass of `total` batches starts (label: "Train 3", "Test", ...). */
    void (*pass_begin)(void *ctx, const char *label, size_t total);
    /* `done` of its batches are finished. */
    void (*pass_update)(void *ctx, size_t done);
    void (*pass_end)(void *ctx);
} TrainReport;

/* The hooks called only when set (r itself may be NULL). */
void report_log(const TrainReport *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void report_pass_begin(const TrainReport *r, const char *label, size_t total);
void report_pass_update(const TrainReport *r, size_t done);
void report_pass_end(const TrainReport *r);

#endif
