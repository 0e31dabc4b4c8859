/* pass_control.c - an If whose condition is a constant (given, or proved by
 * constant folding, which turns shape facts that hold at every profile
 * point into constants) is replaced by the nodes of the branch it takes:
 * copied into the graph with names prefixed by the If's, the branch's
 * inputs (the outer-scope values it captures) wired to the If's inputs, its
 * outputs to the If's through Identity nodes that canonicalization removes.
 * The copied nodes are then optimized with the rest of the graph. */
#include <stdio.h>
#include <string.h>

#include "graph/control.h"
#include "passes.h"

static bool cond_value(const kn_net *net, int t, bool *out) {
    if (t < 0 || !kpass_is_const(net, t))
        return false;
    const kn_tdata *v = &net->tensors[t].value;
    if (kpass_numel(v) != 1)
        return false;
    *out = kpass_value_at(v, 0) != 0;
    return true;
}

/* Copy body g into p->net in place of If node `ni`. */
static kiln_status inline_branch(kpass *p, int ni, const kn_net *g) {
    kn_net *net = p->net;
    int nt = g->n_tensors;
    int *map = kn_malloc((size_t)(nt + 1) * sizeof *map);
    if (!map)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int t = 0; t < nt; t++)
        map[t] = -1;
    char *prefix = kn_strdup(net->nodes[ni].name);
    kiln_status st = prefix ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    /* inputs: the captures, in the If's input order after the condition */
    for (int i = 0; i < g->n_inputs && st == KILN_OK; i++) {
        if (1 + i >= net->nodes[ni].n_in)
            st = kn_node_error(&net->nodes[ni], KILN_ERR_INTERNAL,
                               "branch input %d has no If input", i);
        else
            map[g->inputs[i]] = net->nodes[ni].in[1 + i];
    }
    char hint[512];
    for (int t = 0; t < nt && st == KILN_OK; t++) {
        const kn_tensor *x = &g->tensors[t];
        if (map[t] >= 0 || (x->flags & KN_T_INPUT))
            continue;
        snprintf(hint, sizeof hint, "%s/%s", prefix, x->name);
        if (x->flags & KN_T_CONST) {
            kn_tdata v;
            st = kn_tdata_copy(&v, &x->value);
            if (st == KILN_OK)
                st = kpass_add_const(net, hint, &v, &map[t]);
        } else {
            st = kn_net_new_tensor(net, hint, &map[t]);
        }
    }
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        const kn_node *bn = &g->nodes[i];
        int *in = kn_malloc((size_t)(bn->n_in + bn->n_out + 1) * sizeof *in);
        if (!in) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        int *out = in + bn->n_in;
        for (int k = 0; k < bn->n_in; k++)
            in[k] = bn->in[k] < 0 ? -1 : map[bn->in[k]];
        for (int k = 0; k < bn->n_out; k++)
            out[k] = bn->out[k] < 0 ? -1 : map[bn->out[k]];
        snprintf(hint, sizeof hint, "%s/%s", prefix, bn->name);
        int idx;
        st = kn_net_add_node(net, hint, bn->op_type, bn->domain, bn->opset, bn->n_in, in,
                             bn->n_out, out, &idx);
        kn_free(in);
        if (st != KILN_OK)
            break;
        kn_node *nn = &net->nodes[idx];
        if (bn->n_attr) {
            nn->attrs = kn_calloc((size_t)bn->n_attr, sizeof *nn->attrs);
            if (!nn->attrs)
                st = KILN_ERR_OUT_OF_MEMORY;
            for (int a = 0; a < bn->n_attr && st == KILN_OK; a++) {
                st = kn_attr_copy(&nn->attrs[a], &bn->attrs[a]);
                if (st == KILN_OK)
                    nn->n_attr = a + 1;
            }
        }
    }
    /* the branch's outputs become the If's */
    for (int j = 0; j < net->nodes[ni].n_out && st == KILN_OK; j++) {
        int o = net->nodes[ni].out[j];
        if (o < 0)
            continue;
        if (j >= g->n_outputs) {
            st = kn_node_error(&net->nodes[ni], KILN_ERR_PARSE, "the branch has no output %d", j);
            break;
        }
        int src = map[g->outputs[j]];
        snprintf(hint, sizeof hint, "%s/output %d", prefix, j);
        net->tensors[o].producer = -1;
        st = kn_net_add_node(net, hint, "Identity", "", 16, 1, &src, 1, &o, NULL);
    }
    if (st == KILN_OK) {
        kpass_kill(p, ni);
        kn_log(KILN_LOG_VERBOSE, "control: If '%s' inlined (%d nodes)", prefix, g->n_nodes);
    }
    kn_free(prefix);
    kn_free(map);
    return st;
}

kiln_status kpass_control(kpass *p, int *changed) {
    int n = p->net->n_nodes; /* nodes added here are visited in the next round */
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &p->net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is(nd, "If") || nd->n_in < 1)
            continue;
        bool c;
        if (!cond_value(p->net, nd->in[0], &c))
            continue;
        const kn_attr *a = kn_attr_find(nd, c ? "then_branch" : "else_branch");
        if (!a || a->type != KN_ATTR_GRAPH || !a->graph)
            continue;
        KN_TRY(inline_branch(p, i, a->graph));
        (*changed)++;
    }
    return KILN_OK;
}
