/* What the ctimm command-line tools share: number parsing and the unknown-
 * model message. Each prints one line to stderr on failure. */
#ifndef CTIMM_CLI_COMMON_H
#define CTIMM_CLI_COMMON_H

#include "models/registry.h"
#include "runtime/backend.h"
#include "train/model_kwargs.h"

/* Parses a whole decimal integer in [lo, hi] for option `opt`. */
int cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out);
/* The option's value, or NULL (and a message) when it is missing. */
const char *cli_value(const char *prog, int argc, char **argv, int *i);
/* A byte count for option `opt`: a whole number with an optional K, M or G
 * (binary: KiB, MiB, GiB; "2G", "1536MiB"); 0: none. */
int cli_bytes(const char *prog, const char *opt, const char *s, size_t *out);
/* A finite number for option `opt` (its name without dashes). */
int cli_double(const char *prog, const char *opt, const char *s, double *out);
/* An argparse nargs='+' option inside a getopt_long loop: the numbers in
 * `arg` (commas allowed) and in the numeric words after it, which are
 * consumed (optind moves past them); at most max. */
int cli_number_list(const char *prog, const char *opt, const char *arg, int argc, char **argv, double *out, int max,
                    int *n);
/* --model-kwargs KEY=VALUE ... (argparse nargs='*', timm's ParseKwargs)
 * inside a getopt_long loop: arg and the words after it up to the next
 * option or a word without '=', which are consumed (optind moves past
 * them), appended to kv[*n..CT_MAX_MODEL_KWARGS). */
int cli_model_kwargs(const char *prog, const char *arg, int argc, char **argv, const char **kv, int *n);
/* The same for any such flag (--opt-kwargs), at most max words. */
int cli_kwargs(const char *prog, const char *flag, int max, const char *arg, int argc, char **argv, const char **kv,
               int *n);
/* --gp POOL (NULL: not given) and the --model-kwargs words read into a's
 * options and img_size (train/model_kwargs.h), the keys `script` passes
 * create_model itself (`passed`) refused; before any model is built, as
 * they hold for every model of a list (model_kwargs_check then checks each). */
int cli_model_options(const char *prog, const char *gp, const char *const *kv, int n, const ScriptKwarg *passed,
                      const char *script, ModelArgs *a);
/* The one positional argument (a data folder) after getopt_long: *dir is
 * set when there is one; a second is an error. */
int cli_positional(const char *prog, int argc, char **argv, const char **dir);
/* The non-empty lines of a text file (names: models, classes), malloc'd,
 * freed with cli_free_lines; NULL and err set when it cannot be read or has
 * none. `what` names the option in messages. */
char **cli_read_lines(const char *what, const char *path, int *n, CtErr *err);
void cli_free_lines(char **lines, int n);
/* The backend --device names: cpu, ref, or cuda, which falls back to the
 * cpu backend with a line saying why (no driver, no GPU, or the CUDA
 * executor not built yet); NULL and err set for an unknown name. */
const CtBackend *cli_backend(const char *prog, const char *device, CtErr *err);
/* At the start of main, before any thread: SIGINT and SIGTERM are blocked
 * in every thread and taken by a thread of their own (kill the tool until
 * cli_catch_interrupts); a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, or
 * SIGABRT: glibc's heap checks end that way) prints "PROG: crashed with
 * SIG..." and the thread's backtrace on stderr (the tool's own frames as
 * offsets into it, for addr2line) before the process ends as it would have. */
void cli_init_signals(const char *prog);
/* From here SIGINT and SIGTERM raise the tool's stop flag instead of
 * killing it (a second one kills); programs compiled with
 * cli_program_options() then end a kernel compile under way with its
 * compiler and files, and cli_step stops the tool at the next step.
 * Returns the flag. */
const volatile sig_atomic_t *cli_catch_interrupts(void);
/* Before exec: the new program starts with no signal blocked. */
void cli_unblock_signals(void);
/* The signal that raised the stop flag, or 0. */
int cli_interrupted(void);
/* What every tool compiles with: its stop flag, and the kernel cache's
 * "nothing kept on disk" line said once a process. */
ProgramOptions *cli_program_options(void);
/* backend_open with cli_program_options(): 0, -1, or CT_INTERRUPTED with
 * err saying so. */
int cli_open(CtRunner *r, const CtBackend *be, const Graph *g, CtState *state, CtErr *err);
/* backend_step, or CT_INTERRUPTED (err says so, outputs not kept) when the
 * stop flag was raised before it ended. */
int cli_step(CtRunner *r, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err);
/* backend_run_once with cli_program_options(), or CT_INTERRUPTED (err says
 * so) when the stop flag was raised before it or ended its compile: a tool
 * that runs a graph once. */
int cli_run_once(const CtBackend *be, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                 CtTensor *outputs, CtErr *err);
/* Monotonic seconds, for the tools' timings. */
double cli_now(void);
/* Python's repr() of v as the tools' results files hold it (csv.DictWriter
 * and numpy write repr): the shortest decimal that reads back as v (as a
 * float32 when f32), with ".0" on an integral value. */
void cli_py_repr(char *buf, size_t n, double v, int f32);
/* Finds a model or prints the closest names and returns NULL. */
const ModelEntry *cli_model(const char *prog, const char *name);

#endif
