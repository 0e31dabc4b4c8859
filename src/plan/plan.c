/* plan.c - plan writer and reader (placeholder until the format lands). */
#include <string.h>

#include "plan.h"

kiln_status kp_meta_alloc_profiles(kp_meta *m, int n_profiles, int n_inputs) {
    m->profiles = kn_calloc((size_t)n_profiles + 1, sizeof *m->profiles);
    if (!m->profiles)
        return KILN_ERR_OUT_OF_MEMORY;
    m->n_profiles = n_profiles;
    for (int p = 0; p < n_profiles; p++) {
        kp_profile *pr = &m->profiles[p];
        pr->n_inputs = n_inputs;
        pr->rank = kn_calloc((size_t)n_inputs + 1, sizeof *pr->rank);
        pr->min = kn_calloc((size_t)n_inputs + 1, sizeof *pr->min);
        pr->opt = kn_calloc((size_t)n_inputs + 1, sizeof *pr->opt);
        pr->max = kn_calloc((size_t)n_inputs + 1, sizeof *pr->max);
        if (!pr->rank || !pr->min || !pr->opt || !pr->max) {
            kp_meta_free(m);
            return KILN_ERR_OUT_OF_MEMORY;
        }
    }
    return KILN_OK;
}

void kp_meta_free(kp_meta *m) {
    for (int p = 0; m->profiles && p < m->n_profiles; p++) {
        kn_free(m->profiles[p].rank);
        kn_free(m->profiles[p].min);
        kn_free(m->profiles[p].opt);
        kn_free(m->profiles[p].max);
    }
    kn_free(m->profiles);
    m->profiles = NULL;
    m->n_profiles = 0;
}

kiln_status kp_write(const kn_net *net, const kp_meta *meta, void **out, size_t *size) {
    (void)net; (void)meta; (void)out; (void)size;
    return kn_error(KILN_ERR_UNSUPPORTED, "plan writer not built");
}

kiln_status kp_read(const void *data, size_t size, kn_blob *owner, kn_net **net, kp_meta *meta) {
    (void)data; (void)size; (void)owner; (void)net; (void)meta;
    return kn_error(KILN_ERR_UNSUPPORTED, "plan reader not built");
}

kiln_status kp_read_info(const void *data, size_t size, kiln_plan_info *info) {
    (void)data; (void)size; (void)info;
    return kn_error(KILN_ERR_UNSUPPORTED, "plan reader not built");
}
