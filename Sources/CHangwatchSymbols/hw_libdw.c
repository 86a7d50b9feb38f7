// See hw_libdw.h: libdw and libelf, loaded once, on first use.
#define _GNU_SOURCE
#define HWS_LIBDW_LOADER
#include "hw_libdw.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct hws_libdw_table hws_libdw;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_failed;
static char load_error[512];

// The versions the headers this was built with describe (libdw.so.1 also carries libelf's
// functions through its dependency: one handle finds both).
static void load(void) {
    void *library = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(load_error, sizeof load_error,
                 "symbolication needs elfutils' libdw.so.1 (Debian and Ubuntu: apt install libdw1; Fedora: elfutils-libs): %s",
                 reason ? reason : "not found");
        load_failed = 1;
        return;
    }
#define HWS_LIBDW_RESOLVE(name)                                                                                  \
    if (!load_failed && (hws_libdw.name = (__typeof__(name) *)dlsym(library, #name)) == NULL) {                  \
        snprintf(load_error, sizeof load_error, "libdw.so.1 has no %s (elfutils older than the headers hangwatch was built with)", #name); \
        load_failed = 1;                                                                                         \
    }
    HWS_LIBDW_FUNCTIONS(HWS_LIBDW_RESOLVE)
#undef HWS_LIBDW_RESOLVE
    if (load_failed) {
        memset(&hws_libdw, 0, sizeof hws_libdw);
        return;
    }
    (void)hws_libdw.elf_version(EV_CURRENT);
}

int hws_libdw_load(char *error, size_t error_size) {
    pthread_once(&load_once, load);
    if (!load_failed) return 0;
    if (error != NULL && error_size > 0) snprintf(error, error_size, "%s", load_error);
    return -1;
}
