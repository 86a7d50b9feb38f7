// See include/hw_procfs.h: no libc calls here, on purpose.
#include "hw_procfs.h"

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static int digit_value(char c, int base) {
    if (c >= '0' && c <= '9') return c - '0';
    if (base == 16 && c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (base == 16 && c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The number at text[*at] in `base` (at most 16 digits); -1 when there is no digit there.
static int number(const char *text, size_t length, size_t *at, int base, uint64_t *value) {
    uint64_t result = 0;
    size_t start = *at, digits = 0;
    while (*at < length && digits < 16) {
        int digit = digit_value(text[*at], base);
        if (digit < 0) break;
        result = result * (uint64_t)base + (uint64_t)digit;
        (*at)++;
        digits++;
    }
    if (*at == start) return -1;
    *value = result;
    return 0;
}

uint64_t hw_proc_hex(const char *text, size_t length) {
    size_t at = 0;
    uint64_t value = 0;
    return number(text, length, &at, 16, &value) == 0 ? value : 0;
}

uint64_t hw_proc_decimal(const char *text, size_t length) {
    size_t at = 0;
    uint64_t value = 0;
    return number(text, length, &at, 10, &value) == 0 ? value : 0;
}

int hw_proc_parse_stat(const char *text, size_t length, hw_proc_stat *out) {
    size_t open = 0, close = length;
    while (open < length && text[open] != '(') open++;
    for (size_t i = length; i > open; i--) {
        if (text[i - 1] == ')') { close = i - 1; break; }
    }
    if (open >= length || close >= length || close <= open) return -1;
    out->name_offset = open + 1;
    out->name_length = close - open - 1;
    // After ')': field 3 onwards, one blank apart.
    size_t at = close + 1;
    uint64_t values[39] = {0};
    int last = 2;  // the last field read
    for (int field = 3; field <= 38; field++) {
        // Fields past 22 are optional: a short read (a small buffer) still gives the rest.
        if (at >= length || text[at] != ' ') {
            if (field <= 22) return -1;
            break;
        }
        at++;
        if (field == 3) {
            if (at >= length) return -1;
            out->state = text[at++];
            continue;
        }
        int negative = at < length && text[at] == '-';
        if (negative) at++;
        if (number(text, length, &at, 10, &values[field]) != 0) {
            if (field <= 22) return -1;
            break;
        }
        while (at < length && text[at] != ' ' && text[at] != '\n') at++;  // digits past 16: not ours
        if (field > 22 && at >= length) break;  // maybe cut short by the read: not taken
        if (negative) values[field] = (uint64_t)-(int64_t)values[field];
        last = field;
    }
    out->parent = (int32_t)values[4];
    out->process_group = (int32_t)values[5];
    out->user_ticks = values[14];
    out->system_ticks = values[15];
    out->start_ticks = values[22];
    out->virtual_bytes = last >= 23 ? values[23] : 0;
    out->exit_signal = last >= 38 ? (int32_t)values[38] : -1;
    return 0;
}

int hw_proc_status_field(const char *text, size_t length, const char *key, size_t *value_offset, size_t *value_length) {
    size_t key_length = 0;
    while (key[key_length]) key_length++;
    size_t line = 0;
    while (line < length) {
        size_t end = line;
        while (end < length && text[end] != '\n') end++;
        size_t i = 0;
        while (i < key_length && line + i < end && text[line + i] == key[i]) i++;
        if (i == key_length && line + i < end && text[line + i] == ':') {
            size_t start = line + i + 1;
            while (start < end && is_blank(text[start])) start++;
            *value_offset = start;
            *value_length = end - start;
            return 1;
        }
        line = end + 1;
    }
    return 0;
}

int hw_proc_parse_maps_line(const char *line, size_t length, hw_proc_mapping *out) {
    size_t at = 0;
    uint64_t major = 0, minor = 0;
    if (number(line, length, &at, 16, &out->start) != 0 || at >= length || line[at++] != '-') return -1;
    if (number(line, length, &at, 16, &out->end) != 0 || at >= length || line[at++] != ' ') return -1;
    for (int i = 0; i < 4; i++) {
        if (at >= length) return -1;
        out->perms[i] = line[at++];
    }
    if (at >= length || line[at++] != ' ') return -1;
    if (number(line, length, &at, 16, &out->offset) != 0 || at >= length || line[at++] != ' ') return -1;
    if (number(line, length, &at, 16, &major) != 0 || at >= length || line[at++] != ':') return -1;
    if (number(line, length, &at, 16, &minor) != 0 || at >= length || line[at++] != ' ') return -1;
    if (number(line, length, &at, 10, &out->inode) != 0) return -1;
    out->device_major = (uint32_t)major;
    out->device_minor = (uint32_t)minor;
    while (at < length && is_blank(line[at])) at++;
    size_t end = length;
    while (end > at && is_blank(line[end - 1])) end--;
    out->path_offset = at;
    out->path_length = end - at;
    return 0;
}
