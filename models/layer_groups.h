/*
 * timm's layer-wise learning-rate decay (--layer-decay): a family's
 * group_matcher(coarse=False) as data, each parameter's layer id as
 * timm/models/_manipulate.py group_with_matcher gives it, and the lr scale
 * of each layer as timm/optim/_param_groups.py param_groups_layer_decay.
 */
#ifndef CTIMM_LAYER_GROUPS_H
#define CTIMM_LAYER_GROUPS_H

#include "ir/ir.h"

enum { LG_NO_SUFFIX = -1, LG_MATCH_PREV = 99999 };

/* One (regex, suffix) entry of group_matcher: `group` is the ordinal of its
 * dict key (stem 0, blocks 1), `regex` a POSIX ERE that must match at the
 * start of the name (Python's re.match) and whose captured numbers follow
 * the ordinal in the sort key, `suffix` the key's last number or
 * LG_NO_SUFFIX; a key ending in LG_MATCH_PREV joins the layer before it.
 * A table ends with a NULL regex. */
typedef struct GroupRule {
    const char *regex;
    int group, suffix;
} GroupRule;

/* group_with_matcher(reverse=True) over names[0..n): ids[k] the layer id of
 * names[k] (names no rule matches come last), *nlayers the max id + 1. */
int layer_group_ids(const GroupRule *rules, const char *const *names, int n, int *ids, int *nlayers, CtErr *err);

/* The regexes of rules' block entries (the "blocks" key, each block its own
 * layer: timm's checkpoint_seq units, RematSpec.units) into out[0..max):
 * their count. */
int layer_block_regexes(const GroupRule *rules, const char **out, int max);

/* auto_group_layers, timm's fallback for a model without group_matcher:
 * the params outside the head (names not starting with head_prefix, the
 * cfg's classifier) in order, LG_AUTO_PER_GROUP a layer, then the head's as
 * one more; with no head_prefix every param is head. */
enum { LG_AUTO_PER_GROUP = 12 };
void layer_auto_group_ids(const char *const *names, int n, const char *head_prefix, int *ids, int *nlayers);

/* scale[k] = max(min_scale, decay ^ (nlayers - 1 - ids[k])). */
void layer_decay_scales(const int *ids, int n, int nlayers, double decay, double min_scale, double *scale);

/* Both over the params of model graph g in state_dict order (*nparams of
 * them; ids and scale hold g->nstate): OptimSpec.lr_scale of --layer-decay.
 * rules NULL: layer_auto_group_ids with head_prefix. */
int layer_decay_params(const Graph *g, const GroupRule *rules, const char *head_prefix, double decay,
                       double min_scale, int *ids, double *scale, int *nparams, int *nlayers, CtErr *err);

#endif
