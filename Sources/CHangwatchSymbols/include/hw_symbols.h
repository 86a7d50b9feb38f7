// Offline symbolication over elfutils' libdwfl/libdw. Never called from a signal handler:
// everything here allocates. One `hws_module` wraps one ELF file opened at link-time
// addresses (load bias 0), so a cached module serves every process that loaded the file,
// whatever address it was loaded at.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hws_module hws_module;

/// One frame of an address's (possibly inlined) call chain. Strings are owned by the
/// module and stay valid until `hws_module_close`; copy them before closing.
typedef struct hws_frame {
    /// Raw (possibly mangled) function name; NULL when unknown.
    const char *function;
    /// Source file (absolute, or as the compiler recorded it); NULL when unknown.
    const char *file;
    /// 0 when unknown.
    int32_t line;
    int32_t column;
    /// Offset of the address from the start of the ELF symbol containing it.
    uint64_t function_offset;
    /// 1 when `function_offset` is meaningful (only for the outermost, real function).
    int32_t has_function_offset;
    /// 1 when this frame was inlined into the next one.
    int32_t inlined;
} hws_frame;

/// Opens `path` (a regular ELF file) for symbolication. `debuginfo_path` is an elfutils
/// search string (e.g. ":.debug:/usr/lib/debug") used to find separate debug files;
/// NULL means elfutils' default. On failure returns NULL and writes a message to `error`.
hws_module *hws_module_open(const char *path, const char *debuginfo_path, char *error, size_t error_size);

void hws_module_close(hws_module *module);

/// Symbolicates the link-time address `link_address` (runtime address minus load bias).
/// Writes up to `capacity` frames, innermost inlined frame first, the real function last.
/// Returns the number of frames written (0 when nothing at all is known about the address).
int hws_module_symbolicate(hws_module *module, uint64_t link_address, hws_frame *frames, int capacity);

/// 1 when the module has DWARF (in the file itself or in a separate debug file found).
int hws_module_has_dwarf(hws_module *module);

/// Reads the GNU build-id note of the ELF file at `path` into `bytes`.
/// Returns the id's length (possibly larger than `capacity`: then truncated), 0 when the
/// file has no build-id, -1 when the file cannot be opened or is not a regular ELF file.
ssize_t hws_file_build_id(const char *path, uint8_t *bytes, size_t capacity);

/// Demangles an Itanium C++ name ("_Z…") through libstdc++'s __cxa_demangle when it is
/// present in the process. Returns a malloc'd string (free() it) or NULL.
char *hws_cxx_demangle(const char *name);

#ifdef __cplusplus
}
#endif
