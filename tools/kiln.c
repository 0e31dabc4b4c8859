/* kiln.c - the kiln command line (placeholder until the CLI lands). */
#include <stdio.h>

#include "kiln/kiln.h"

int main(void) {
    printf("kiln %s\n", kiln_version_string());
    return 0;
}
