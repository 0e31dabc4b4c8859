/* control.h - control flow (If, Loop, Scan): outer-scope references of
 * subgraphs made explicit, and the body runner that shape inference and the
 * CPU kernels share (src/graph/ops_control.c, src/runtime/control.c). */
#ifndef KILN_CONTROL_H
#define KILN_CONTROL_H

#include "graph/graph.h"

/* The attribute that counts the inputs a control-flow node gained when its
 * bodies' outer-scope references were made explicit: they follow the ONNX
 * inputs, and each body has them as its last graph inputs, in that order. */
#define KN_CAPTURES_ATTR "kiln_captures"

/* For every If / Loop / Scan node of net (bodies first, to any depth): each
 * value a body reads that no node of the body produces, nor a body input or
 * constant, is looked up by name in the enclosing graph and passed in as an
 * extra node input and body input. In the main graph (is_sub 0) a name no
 * graph defines fails naming the node; inside a subgraph it is left for the
 * enclosing graph to resolve. Idempotent. */
KN_HIDDEN kiln_status kn_net_resolve_captures(kn_net *net, int is_sub);

/* Shape inference of a body: its graph inputs take in[0..n_in) (type, shape,
 * value when known), out gets its graph outputs' types and shapes (values
 * NULL). Runs kiln's executor's inference on a copy (src/runtime/control.c). */
KN_HIDDEN kiln_status kx_body_infer(const kn_node *node, const kn_net *body, int n_in,
                                    const kn_tinfo *in, int n_out, kn_tinfo *out);
/* The same where a body input whose value its shapes need is not known
 * when shapes are inferred (a capture computed by the network: the boxes
 * Mask R-CNN pastes its masks into): zeros stand in for its value, the
 * outputs are marked data-dependent (the node's kernel reports the true
 * shapes) and *estimated is set. The shapes are then an estimate that the
 * run checks: an output that outgrows it fails the run naming the node.
 * With estimated NULL, or an input of over 64 MiB, it fails as
 * kx_body_infer does. */
KN_HIDDEN kiln_status kx_body_infer_est(const kn_node *node, const kn_net *body, int n_in,
                                        const kn_tinfo *in, int n_out, kn_tinfo *out,
                                        bool *estimated);

#endif
