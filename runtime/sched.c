/*
 * timm's LR schedulers (timm/scheduler/ *_lr.py, create_scheduler_v2), with the
 * arithmetic in Python's order so that values agree to the last bit or so.
 */
#include "runtime/sched.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CT_PI 3.141592653589793 /* math.pi */

static const char *const kind_names[] = {"none", "cosine", "tanh", "step", "multistep", "plateau", "poly"};
_Static_assert(sizeof kind_names / sizeof *kind_names == CT_SCHED_POLY + 1, "one name per CtSchedKind");

SchedArgs sched_args_default(void)
{
    return (SchedArgs){.kind = CT_SCHED_COSINE, .epochs = 300, .decay_epochs = 90,
                       .decay_milestones = {90, 180, 270}, .n_milestones = 3, .warmup_epochs = 5,
                       .warmup_lr = 1e-5, .patience_epochs = 10, .decay_rate = 0.1, .noise_pct = 0.67,
                       .noise_std = 1, .noise_seed = 42, .cycle_mul = 1, .cycle_decay = 0.5, .cycle_limit = 1,
                       .k_decay = 1};
}

int sched_kind_parse(const char *name)
{
    for (int k = 0; k <= CT_SCHED_POLY; k++)
        if (!strcmp(name, kind_names[k]))
            return k;
    return -1;
}

/* Python's float floor division (float_floor_div), which is not floor(a/b). */
static double py_floordiv(double a, double b)
{
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0)))
        div -= 1;
    if (div == 0)
        return copysign(0, a / b);
    double fl = floor(div);
    return div - fl > 0.5 ? fl + 1 : fl;
}

static int has_cycles(CtSchedKind k) { return k == CT_SCHED_COSINE || k == CT_SCHED_TANH || k == CT_SCHED_POLY; }

/* get_cycle_length() of the cosine, tanh and poly schedulers. */
static double cycle_length(const LrSched *s)
{
    int cycles = s->a.cycle_limit > 1 ? s->a.cycle_limit : 1;
    double cm = s->a.cycle_mul, t;
    if (cm == 1.0)
        t = s->t_initial * cycles;
    else
        t = floor(-s->t_initial * (pow(cm, cycles) - 1) / (1 - cm));
    return s->a.warmup_prefix ? t + s->warmup_t : t;
}

/* The decaying part of cosine, tanh and poly, at t past the warmup. */
static double cyclic_value(const LrSched *s, double t)
{
    double cm = s->a.cycle_mul, i, t_i, t_curr;
    if (cm != 1) {
        i = floor(log(1 - t / s->t_initial * (1 - cm)) / log(cm));
        t_i = pow(cm, i) * s->t_initial;
        t_curr = t - (1 - pow(cm, i)) / (1 - cm) * s->t_initial;
    } else {
        i = floor(t / s->t_initial); /* whole numbers: Python's int // */
        t_i = s->t_initial;
        t_curr = t - s->t_initial * i;
    }
    if (!(i < s->a.cycle_limit))
        return s->a.min_lr;
    double lr_max = s->base_lr * pow(s->a.cycle_decay, i), k = s->a.k_decay, lo = s->a.min_lr;
    switch (s->a.kind) {
    case CT_SCHED_COSINE: return lo + 0.5 * (lr_max - lo) * (1 + cos(CT_PI * pow(t_curr, k) / pow(t_i, k)));
    case CT_SCHED_POLY: return lo + (lr_max - lo) * pow(1 - pow(t_curr, k) / pow(t_i, k), s->a.decay_rate);
    default: {
        double tr = t_curr / t_i; /* tanh, lb -7, ub 3 */
        return lo + 0.5 * (lr_max - lo) * (1 - tanh(-7.0 * (1. - tr) + 3.0 * tr));
    }
    }
}

/* bisect.bisect_right(milestones, x) */
static int bisect_right(const double *m, int n, double x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (x < m[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

double sched_value(const LrSched *s, double t)
{
    if (s->a.kind == CT_SCHED_NONE)
        return s->base_lr;
    if (t < s->warmup_t)
        return s->a.warmup_lr + t * s->warmup_step;
    if (s->a.warmup_prefix)
        t = t - s->warmup_t;
    switch (s->a.kind) {
    case CT_SCHED_STEP: return s->base_lr * pow(s->a.decay_rate, py_floordiv(t, s->decay_t));
    case CT_SCHED_MULTISTEP:
        return s->base_lr * pow(s->a.decay_rate, bisect_right(s->milestones, s->a.n_milestones, t + 1));
    case CT_SCHED_PLATEAU: CT_ASSERT(!"sched_value of a plateau schedule"); return 0;
    default: return cyclic_value(s, t);
    }
}

/* torch's mt19937 (at::mt19937, seeded like std::mt19937 from the low 32 bits). */
typedef struct Mt {
    uint32_t st[624];
    int i;
} Mt;

static void mt_seed(Mt *m, uint32_t seed)
{
    m->st[0] = seed;
    for (int j = 1; j < 624; j++)
        m->st[j] = 1812433253u * (m->st[j - 1] ^ (m->st[j - 1] >> 30)) + (uint32_t)j;
    m->i = 624;
}

static uint32_t mt_next(Mt *m)
{
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->st[k] & 0x80000000u) | (m->st[(k + 1) % 624] & 0x7fffffffu);
            m->st[k] = m->st[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
        }
        m->i = 0;
    }
    uint32_t y = m->st[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* at::uniform_real_distribution<double>(0, 1): 53 low bits of random64(). */
static double mt_uniform(Mt *m)
{
    uint64_t hi = mt_next(m), lo = mt_next(m);
    return (double)(((hi << 32) | lo) & ((1ull << 53) - 1)) * (1.0 / (double)(1ull << 53));
}

double sched_noise(unsigned long long seed, double pct)
{
    /* torch.randn(1) on the cpu: at::normal_distribution<double>, which
     * caches the Box-Muller sine for the next draw, then a cast to float. */
    Mt m;
    mt_seed(&m, (uint32_t)seed);
    for (;;) {
        double u1 = mt_uniform(&m), u2 = mt_uniform(&m);
        double r = sqrt(-2.0 * log(1.0 - u2)), theta = 2.0 * CT_PI * u1;
        double n1 = (float)(r * cos(theta)), n2 = (float)(r * sin(theta));
        if (fabs(n1) < pct)
            return n1;
        if (fabs(n2) < pct)
            return n2;
    }
}

static int in_noise(const LrSched *s, double t) { return s->has_noise && s->noise_lo <= t && t < s->noise_hi; }

static double with_noise(const LrSched *s, double v, double t)
{
    if (!in_noise(s, t))
        return v;
    double n = sched_noise((unsigned long long)s->a.noise_seed + (unsigned long long)(long long)t, s->a.noise_pct);
    return v + v * n;
}

int sched_init(LrSched *s, const SchedArgs *a, double base_lr, int updates_per_epoch, CtErr *err)
{
    memset(s, 0, sizeof *s);
    s->a = *a;
    s->base_lr = base_lr;
    if (a->on_updates && updates_per_epoch <= 0)
        return ct_fail(err, "--sched-on-updates needs at least one update per epoch");
    if (a->on_updates && a->kind == CT_SCHED_PLATEAU)
        return ct_fail(err, "--sched plateau steps per epoch only (timm: 'Plateau LR only supports step per epoch')");
    if (has_cycles(a->kind) && a->epochs <= 0)
        return ct_fail(err, "--epochs must be positive for --sched %s", kind_names[a->kind]);
    if (has_cycles(a->kind) && a->cycle_mul != 1 && !(a->cycle_mul > 0))
        return ct_fail(err, "--lr-cycle-mul must be positive");
    if (a->min_lr < 0)
        return ct_fail(err, "--min-lr must not be negative");
    if (a->n_noise && !(a->noise_pct > 0))
        return ct_fail(err, "--lr-noise-pct must be positive (timm would redraw the noise forever)");
    if (a->kind == CT_SCHED_STEP && !(a->decay_epochs > 0))
        return ct_fail(err, "--decay-epochs must be positive");
    if (a->n_milestones > SCHED_MAX_MILESTONES)
        return ct_fail(err, "more than %d --decay-milestones", SCHED_MAX_MILESTONES);
    double upe = a->on_updates ? updates_per_epoch : 1;
    s->t_initial = a->epochs * upe;
    s->warmup_t = a->warmup_epochs * upe;
    s->decay_t = a->decay_epochs * upe;
    s->cooldown_t = a->cooldown_epochs * upe;
    for (int k = 0; k < a->n_milestones; k++)
        s->milestones[k] = a->decay_milestones[k] * upe;
    if (a->n_noise) {
        s->has_noise = 1;
        s->noise_lo = a->noise[0] * s->t_initial;
        s->noise_hi = a->n_noise > 1 ? a->noise[1] * s->t_initial : INFINITY;
    }
    s->warmup_step = 1;
    if (s->warmup_t != 0) {
        double top = base_lr;
        if (a->kind == CT_SCHED_TANH && !a->warmup_prefix) /* tanh warms up to its own value at warmup_t */
            top = cyclic_value(s, s->warmup_t);
        s->warmup_step = (top - a->warmup_lr) / s->warmup_t;
    }
    s->lr = s->warmup_t != 0 && a->kind != CT_SCHED_NONE ? a->warmup_lr : base_lr;
    s->best = a->plateau_min ? INFINITY : -INFINITY;
    if (has_cycles(a->kind)) {
        double t = cycle_length(s) + s->cooldown_t;
        s->num_epochs = a->on_updates ? (int)floor(t / upe) : (int)t;
    } else {
        s->num_epochs = a->epochs + (a->warmup_prefix ? (int)a->warmup_epochs : 0);
    }
    return 0;
}

/* PlateauLRScheduler.step around torch's ReduceLROnPlateau (threshold 1e-4
 * relative, cooldown 0, eps 1e-8). */
static void plateau_step(LrSched *s, int epoch, double metric)
{
    if (epoch <= s->warmup_t) {
        s->lr = s->a.warmup_lr + epoch * s->warmup_step;
        return;
    }
    if (s->has_restore) {
        s->lr = s->restore_lr;
        s->has_restore = 0;
    }
    if (!isnan(metric)) {
        int better = s->a.plateau_min ? metric < s->best * (1. - 1e-4) : metric > s->best * (1e-4 + 1.);
        if (better) {
            s->best = metric;
            s->num_bad = 0;
        } else {
            s->num_bad++;
        }
        if (s->cooldown_counter > 0) {
            s->cooldown_counter--;
            s->num_bad = 0;
        }
        if (s->num_bad > s->a.patience_epochs) {
            double old = s->lr, nw = old * s->a.decay_rate;
            if (nw < s->a.min_lr)
                nw = s->a.min_lr;
            if (old - nw > 1e-8)
                s->lr = nw;
            s->cooldown_counter = 0;
            s->num_bad = 0;
        }
    }
    if (in_noise(s, epoch)) {
        s->restore_lr = s->lr;
        s->has_restore = 1;
        s->lr = with_noise(s, s->lr, epoch);
    }
}

void sched_step_metric(LrSched *s, int epoch, double metric)
{
    if (s->a.kind == CT_SCHED_PLATEAU)
        plateau_step(s, epoch, metric);
    else if (!s->a.on_updates)
        s->lr = with_noise(s, sched_value(s, epoch), epoch);
}

void sched_step(LrSched *s, int epoch) { sched_step_metric(s, epoch, NAN); }

void sched_step_update(LrSched *s, long num_updates)
{
    if (s->a.on_updates && s->a.kind != CT_SCHED_PLATEAU)
        s->lr = with_noise(s, sched_value(s, (double)num_updates), (double)num_updates);
}

void sched_format(const LrSched *s, char *buf, size_t n)
{
    snprintf(buf, n, "%.17g,%.17g,%.17g,%d,%d,%d", s->lr, s->best, s->restore_lr, s->num_bad, s->cooldown_counter,
             s->has_restore);
}

int sched_parse(LrSched *s, const char *str)
{
    LrSched t = *s;
    if (sscanf(str, "%lf,%lf,%lf,%d,%d,%d", &t.lr, &t.best, &t.restore_lr, &t.num_bad, &t.cooldown_counter,
               &t.has_restore) != 6)
        return -1;
    *s = t;
    return 0;
}
