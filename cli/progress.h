/*
 * A progress bar for long work (an epoch, a validation pass, kernel
 * compiles), drawn on stdout only when stdout is a terminal; elsewhere
 * (logs, pipes, CI) it prints nothing and the plain log lines are all.
 * Log lines printed while a bar is up go through progress_log, which clears
 * the bar, prints the line and draws the bar again below it.
 */
#ifndef CTIMM_CLI_PROGRESS_H
#define CTIMM_CLI_PROGRESS_H

#include <stddef.h>

typedef struct Progress {
    char label[48];
    size_t total, done;
    int tty, shown;
    double t0, last; /* start and last draw (seconds, monotonic) */
} Progress;

/* tty < 0: decide by isatty(stdout); 0 or 1 forces it (tests). */
void progress_begin(Progress *p, const char *label, size_t total, int tty);
/* `done` of total are finished; redrawn at most 10 times a second. */
void progress_update(Progress *p, size_t done);
/* printf to stdout with the bar moved below the line. */
void progress_log(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the bar. */
void progress_end(Progress *p);

#endif
