// Internal to CHangwatchSymbols: elfutils' libdw and libelf, loaded on first use (hw_libdw.c)
// instead of linked. A program that links hangwatch's libraries only to capture (a server with
// HangMonitor) then starts without them — they are not in a slim container image, and mapping
// them with their compressors costs every start about half a millisecond — and only
// symbolication needs them: hws_module_open loads them and reports, as its error, why not.
//
// Included after elfutils' headers by every file of this target that calls them: each
// function below is then a call through the table hws_libdw_load fills. A function this
// target starts to use is added to HWS_LIBDW_FUNCTIONS and to the #defines (the link fails
// without: nothing links -ldw).
#ifndef HW_LIBDW_H
#define HW_LIBDW_H

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>
#include <stddef.h>

#define HWS_LIBDW_FUNCTIONS(X)                                                                                 \
    X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_child) X(dwarf_cu_getdwarf) X(dwarf_diename)             \
    X(dwarf_dieoffset) X(dwarf_filesrc) X(dwarf_formstring) X(dwarf_formudata) X(dwarf_getelf)             \
    X(dwarf_getscopes) X(dwarf_getscopes_die) X(dwarf_getsrc_die) X(dwarf_getsrcfiles) X(dwarf_getsrclines) \
    X(dwarf_haspc) X(dwarf_lineaddr) X(dwarf_linecol) X(dwarf_lineendsequence) X(dwarf_lineno)             \
    X(dwarf_linesrc) X(dwarf_nextcu) X(dwarf_offdie) X(dwarf_onesrcline) X(dwarf_ranges) X(dwarf_siblingof) \
    X(dwarf_tag) X(dwfl_begin) X(dwfl_build_id_find_debuginfo) X(dwfl_build_id_find_elf) X(dwfl_end)       \
    X(dwfl_errmsg) X(dwfl_lineinfo) X(dwfl_module_addrdie) X(dwfl_module_addrinfo) X(dwfl_module_getdwarf)   \
    X(dwfl_module_getelf) X(dwfl_module_getsrc) X(dwfl_module_getsym_info) X(dwfl_module_getsymtab)         \
    X(dwfl_module_getsymtab_first_global) X(dwfl_offline_section_address) X(dwfl_report_begin)              \
    X(dwfl_report_elf) X(dwfl_report_end) X(elf_getshdrstrndx) X(elf_getdata) X(elf_rawfile) X(elf_getscn) X(elf_ndxscn) X(elf_nextscn) \
    X(elf_strptr) X(elf_version) X(gelf_getehdr) X(gelf_getshdr)

struct hws_libdw_table {
#define HWS_LIBDW_POINTER(name) __typeof__(name) *name;
    HWS_LIBDW_FUNCTIONS(HWS_LIBDW_POINTER)
#undef HWS_LIBDW_POINTER
};

// Filled once by hws_libdw_load; read only after it returned 0.
extern struct hws_libdw_table hws_libdw;

// Loads libdw.so.1 (and with it libelf.so.1) once: 0, or -1 with why not in `error`
// (every call after a failure gives the same reason).
int hws_libdw_load(char *error, size_t error_size);

#ifndef HWS_LIBDW_LOADER
#define dwarf_attr (hws_libdw.dwarf_attr)
#define dwarf_attr_integrate (hws_libdw.dwarf_attr_integrate)
#define dwarf_child (hws_libdw.dwarf_child)
#define dwarf_cu_getdwarf (hws_libdw.dwarf_cu_getdwarf)
#define dwarf_diename (hws_libdw.dwarf_diename)
#define dwarf_dieoffset (hws_libdw.dwarf_dieoffset)
#define dwarf_filesrc (hws_libdw.dwarf_filesrc)
#define dwarf_formstring (hws_libdw.dwarf_formstring)
#define dwarf_formudata (hws_libdw.dwarf_formudata)
#define dwarf_getelf (hws_libdw.dwarf_getelf)
#define dwarf_getscopes (hws_libdw.dwarf_getscopes)
#define dwarf_getscopes_die (hws_libdw.dwarf_getscopes_die)
#define dwarf_getsrc_die (hws_libdw.dwarf_getsrc_die)
#define dwarf_getsrcfiles (hws_libdw.dwarf_getsrcfiles)
#define dwarf_getsrclines (hws_libdw.dwarf_getsrclines)
#define dwarf_haspc (hws_libdw.dwarf_haspc)
#define dwarf_lineaddr (hws_libdw.dwarf_lineaddr)
#define dwarf_linecol (hws_libdw.dwarf_linecol)
#define dwarf_lineendsequence (hws_libdw.dwarf_lineendsequence)
#define dwarf_lineno (hws_libdw.dwarf_lineno)
#define dwarf_linesrc (hws_libdw.dwarf_linesrc)
#define dwarf_nextcu (hws_libdw.dwarf_nextcu)
#define dwarf_offdie (hws_libdw.dwarf_offdie)
#define dwarf_onesrcline (hws_libdw.dwarf_onesrcline)
#define dwarf_ranges (hws_libdw.dwarf_ranges)
#define dwarf_siblingof (hws_libdw.dwarf_siblingof)
#define dwarf_tag (hws_libdw.dwarf_tag)
#define dwfl_begin (hws_libdw.dwfl_begin)
#define dwfl_build_id_find_debuginfo (hws_libdw.dwfl_build_id_find_debuginfo)
#define dwfl_build_id_find_elf (hws_libdw.dwfl_build_id_find_elf)
#define dwfl_end (hws_libdw.dwfl_end)
#define dwfl_errmsg (hws_libdw.dwfl_errmsg)
#define dwfl_lineinfo (hws_libdw.dwfl_lineinfo)
#define dwfl_module_addrdie (hws_libdw.dwfl_module_addrdie)
#define dwfl_module_addrinfo (hws_libdw.dwfl_module_addrinfo)
#define dwfl_module_getdwarf (hws_libdw.dwfl_module_getdwarf)
#define dwfl_module_getelf (hws_libdw.dwfl_module_getelf)
#define dwfl_module_getsrc (hws_libdw.dwfl_module_getsrc)
#define dwfl_module_getsym_info (hws_libdw.dwfl_module_getsym_info)
#define dwfl_module_getsymtab (hws_libdw.dwfl_module_getsymtab)
#define dwfl_module_getsymtab_first_global (hws_libdw.dwfl_module_getsymtab_first_global)
#define dwfl_offline_section_address (hws_libdw.dwfl_offline_section_address)
#define dwfl_report_begin (hws_libdw.dwfl_report_begin)
#define dwfl_report_elf (hws_libdw.dwfl_report_elf)
#define dwfl_report_end (hws_libdw.dwfl_report_end)
#define elf_getshdrstrndx (hws_libdw.elf_getshdrstrndx)
#define elf_getdata (hws_libdw.elf_getdata)
#define elf_rawfile (hws_libdw.elf_rawfile)
#define elf_getscn (hws_libdw.elf_getscn)
#define elf_ndxscn (hws_libdw.elf_ndxscn)
#define elf_nextscn (hws_libdw.elf_nextscn)
#define elf_strptr (hws_libdw.elf_strptr)
#define elf_version (hws_libdw.elf_version)
#define gelf_getehdr (hws_libdw.gelf_getehdr)
#define gelf_getshdr (hws_libdw.gelf_getshdr)
#endif

#endif
