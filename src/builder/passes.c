/* passes.c - the optimization pass manager (placeholder until passes land). */
#include "builder.h"

kiln_status kbld_optimize(kbld *b) {
    (void)b;
    return KILN_OK;
}
