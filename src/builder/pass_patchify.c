/* pass_patchify.c - a patch embedding (Conv whose kernel equals its stride,
 * no padding or dilation, one group: ViT's 16x16/16, Swin's 4x4/4) becomes
 * a GEMM over the patches:
 *   X [N, C, H, W] -> Reshape [N, C, OH, kh, OW, kw]
 *                  -> Transpose [0, 2, 4, 1, 3, 5] -> Reshape [N, OH*OW, C*kh*kw]
 *                  -> MatMul (W as [C*kh*kw, OC]) + bias -> [N, OH*OW, OC]
 *                  -> Reshape [N, OH, OW, OC] -> Transpose [0, 3, 1, 2]
 * The patches do not overlap, so gathering them is one copy of the input,
 * and the product is one large GEMM instead of a convolution that libraries
 * run poorly at three input channels (cuDNN took 0.69 ms for ViT-B/16's at
 * batch 64, about 30 times its GEMM). Taken only when the Conv's output goes
 * to a layout op (the patch sequence: ViT reshapes it to tokens, Swin
 * permutes it to channels-last), where the trailing Transpose meets the
 * model's own and the two cancel (pass_mha.c's view chains). */
#include <stdio.h>
#include <string.h>

#include "graph/ops_nn.h"
#include "passes.h"

static kiln_status add_node1(kn_net *net, const char *base, const char *what, const char *op,
                             int n_in, const int *in, int out, int *node) {
    char name[600];
    snprintf(name, sizeof name, "%s (%s)", base, what);
    return kn_net_add_node(net, name, op, "", 14, n_in, in, 1, &out, node);
}

static bool is_conv(const kn_node *n) { return kpass_is(n, "Conv"); }

/* The one reader of t that is a Reshape or Transpose when every other
 * reader is a Shape and t is no graph output; else -1. */
static int layout_reader(const kpass *p, int t) {
    const kn_net *net = p->net;
    if (t < 0 || t >= p->n_tensors || p->is_output[t])
        return -1;
    int found = -1;
    for (int k = p->rd_start[t]; k < p->rd_start[t + 1]; k++) {
        int r = p->rd_node[k];
        if (!kpass_free(p, r))
            return -1;
        const kn_node *n = &net->nodes[r];
        if (kpass_is(n, "Shape"))
            continue;
        if (found >= 0 || !(kpass_is(n, "Reshape") || kpass_is(n, "Transpose")) || n->in[0] != t)
            return -1;
        found = r;
    }
    return found;
}

kiln_status kpass_patchify(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_conv, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *cv = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is(cv, "Conv") || cv->n_in < 2 || cv->in[0] < 0 ||
            !kpass_is_const(net, cv->in[1]) || cv->n_out < 1 || cv->out[0] < 0 ||
            (cv->n_in > 2 && cv->in[2] >= 0 && !kpass_is_const(net, cv->in[2])))
            continue;
        const kn_tdata *w = &net->tensors[cv->in[1]].value;
        if (w->rank != 4 || w->dtype != KILN_DTYPE_FLOAT || kn_attr_int(cv, "group", 1) != 1 ||
            strcmp(kn_attr_string(cv, "auto_pad", "NOTSET"), "NOTSET") != 0)
            continue;
        int64_t kh = w->dims[2], kw = w->dims[3], oc = w->dims[0], c = w->dims[1];
        if (kh < 2 && kw < 2)
            continue;
        size_t nk = 0;
        const int64_t *kattr = kn_attr_ints(cv, "kernel_shape", &nk);
        if (kattr && (nk != 2 || kattr[0] != kh || kattr[1] != kw))
            continue;
        /* the output goes to a layout op (and, besides, only to Shape: the
         * rewrite keeps the tensor, so a TorchScript export's reshape target
         * read from Shape(conv) is still right) */
        if (layout_reader(p, cv->out[0]) < 0)
            continue;
        /* H and W static multiples of the kernel; N may vary */
        int64_t h = -1, wd = -1;
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            const kn_tinfo *x = kpass_shape(p, k, cv->in[0]);
            ok = x && x->rank == 4 && x->dims[1] == c && (h < 0 || (x->dims[2] == h && x->dims[3] == wd));
            if (ok) {
                h = x->dims[2];
                wd = x->dims[3];
            }
        }
        /* the window: stride = kernel, no padding or dilation, whole patches */
        const int64_t in[2] = {h, wd}, ks[2] = {kh, kw};
        kn_window win;
        if (!ok || kn_window_forward(cv, 2, in, ks, false, &win) != KILN_OK) {
            kn_error_clear();
            continue;
        }
        for (int d = 0; d < 2 && ok; d++)
            ok = win.stride[d] == ks[d] && win.dil[d] == 1 && win.pad0[d] == 0 && win.pad1[d] == 0 &&
                 win.out[d] * ks[d] == in[d];
        if (!ok)
            continue;
        int64_t oh = h / kh, ow = wd / kw, kk = c * kh * kw;
        /* W [OC, C, kh, kw] as [C*kh*kw, OC] */
        kn_tdata wt;
        int64_t wdims[2] = {kk, oc};
        KN_TRY(kn_tdata_alloc(&wt, KILN_DTYPE_FLOAT, 2, wdims));
        void *tmp = NULL;
        const float *src = kn_tdata_aligned(w, &tmp);
        if (!src) {
            kn_tdata_free(&wt);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        float *dst = wt.data;
        for (int64_t o = 0; o < oc; o++)
            for (int64_t r = 0; r < kk; r++)
                dst[r * oc + o] = src[o * kk + r];
        kn_aligned_free(tmp);
        char base[512];
        snprintf(base, sizeof base, "%s", cv->name);
        int wmat, s6, s3, s4, x6, xp, xm, y, yb, y4, node, bias = cv->n_in > 2 ? cv->in[2] : -1;
        int x = cv->in[0], out = cv->out[0];
        KN_TRY(kpass_add_const(net, "patch_weight", &wt, &wmat));
        const int64_t sh6[6] = {-1, c, oh, kh, ow, kw}, sh3[3] = {-1, oh * ow, kk},
                      sh4[4] = {-1, oh, ow, oc}, perm6[6] = {0, 2, 4, 1, 3, 5},
                      perm4[4] = {0, 3, 1, 2};
        KN_TRY(kpass_add_i64(net, "patch_shape", sh6, 6, &s6));
        KN_TRY(kpass_add_i64(net, "patch_rows", sh3, 3, &s3));
        KN_TRY(kpass_add_i64(net, "patch_out", sh4, 4, &s4));
        KN_TRY(kn_net_new_tensor(net, "patches6", &x6));
        KN_TRY(kn_net_new_tensor(net, "patches_t", &xp));
        KN_TRY(kn_net_new_tensor(net, "patches", &xm));
        KN_TRY(kn_net_new_tensor(net, "patch_mm", &y));
        KN_TRY(kn_net_new_tensor(net, "patch_out", &y4));
        int in2[2] = {x, s6};
        KN_TRY(add_node1(net, base, "patches", "Reshape", 2, in2, x6, &node));
        KN_TRY(add_node1(net, base, "patch order", "Transpose", 1, &x6, xp, &node));
        KN_TRY(kn_node_set_ints(&net->nodes[node], "perm", perm6, 6));
        in2[0] = xp, in2[1] = s3;
        KN_TRY(add_node1(net, base, "patch rows", "Reshape", 2, in2, xm, &node));
        in2[0] = xm, in2[1] = wmat;
        KN_TRY(add_node1(net, base, "patch GEMM", "MatMul", 2, in2, y, &node));
        yb = y;
        if (bias >= 0) {
            KN_TRY(kn_net_new_tensor(net, "patch_bias", &yb));
            in2[0] = y, in2[1] = bias;
            KN_TRY(add_node1(net, base, "bias", "Add", 2, in2, yb, &node));
        }
        in2[0] = yb, in2[1] = s4;
        KN_TRY(add_node1(net, base, "patch grid", "Reshape", 2, in2, y4, &node));
        KN_TRY(add_node1(net, base, "channels first", "Transpose", 1, &y4, out, &node));
        KN_TRY(kn_node_set_ints(&net->nodes[node], "perm", perm4, 4));
        kpass_kill(p, i);
        kn_log(KILN_LOG_VERBOSE, "patchify: '%s' is a GEMM over %lldx%lld patches (K = %lld)", base,
               (long long)kh, (long long)kw, (long long)kk);
        (*changed)++;
    }
    return KILN_OK;
}
