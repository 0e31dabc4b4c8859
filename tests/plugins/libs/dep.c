/* dep.c - a library a broken plugin links against and that is then kept out
 * of the loader's reach, to test the missing-dependency message. */
__attribute__((visibility("default"))) int kiln_test_dep_value(void) { return 42; }
