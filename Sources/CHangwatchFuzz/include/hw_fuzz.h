// libFuzzer's entry for programs with their own main (LLVM >= 11): hangwatch-fuzz calls it
// only when built by scripts/fuzz, which links libclang_rt.fuzzer_no_main.
#ifndef HW_FUZZ_H
#define HW_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
