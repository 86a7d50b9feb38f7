// Async-signal-safe intermediate dump writer: bytes gather in the writer's own buffer and
// leave through write(2) only. No malloc, no locks, no stdio, no thread-locals (errno is
// saved and restored so an interrupted program never sees it change).
#include "hw_dump.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the format is little-endian and u64 arrays are copied as they lie in memory");
_Static_assert(sizeof(double) == 8 && sizeof(uint64_t) == 8, "8-byte values");
_Static_assert(sizeof(HWD_MAGIC) == HWD_MAGIC_SIZE, "magic is 8 bytes including its NUL");
_Static_assert(HWD_MAGIC_SIZE + 4 + 4 == HWD_HEADER_SIZE, "header layout");
_Static_assert(HWD_KEY_INCOMPLETE <= UINT16_MAX, "keys travel as u16");
_Static_assert(HWD_WRITER_BUFFER_SIZE >= HWD_HEADER_SIZE + HWD_PROPERTY_HEADER_SIZE + 8,
               "header and version property fit the buffer");
_Static_assert(HWD_MAX_DEPTH <= 255 && sizeof(((hwd_writer *)0)->containers) == HWD_MAX_DEPTH,
               "container stack");

static int fail(hwd_writer *w, int error) {
    if (w->error == 0) w->error = error;
    return w->error;
}

static int sink_write(hwd_writer *w, const uint8_t *bytes, uint64_t length) {
    if (w->sink == HWD_SINK_MEMORY) {
        if (w->memory_capacity > 0) {
            uint64_t written = w->bytes_total - w->buffer_used;  /* bytes already in memory */
            if (length > w->memory_capacity - written) return fail(w, HWD_ERROR_NO_SPACE);
            memcpy(w->memory + written, bytes, (size_t)length);
        }
        return 0;
    }
    int saved_errno = errno;
    while (length > 0) {
        ssize_t n = write(w->fd, bytes, length > 0x40000000u ? 0x40000000u : (size_t)length);
        if (n < 0) {
            if (errno == EINTR) continue;
            int error = errno;
            errno = saved_errno;
            return fail(w, error);
        }
        if (n == 0) {
            errno = saved_errno;
            return fail(w, HWD_ERROR_SHORT_WRITE);
        }
        bytes += n;
        length -= (uint64_t)n;
    }
    errno = saved_errno;
    return 0;
}

int hwd_flush(hwd_writer *w) {
    if (w->error) return w->error;
    if (w->buffer_used == 0) return 0;
    // bytes_total already counts the buffer; sink_write's memory offset relies on buffer_used.
    int error = sink_write(w, w->buffer, w->buffer_used);
    w->buffer_used = 0;
    return error;
}

/// Appends raw bytes: small pieces go through the buffer, big ones straight to the sink.
static int append(hwd_writer *w, const void *data, uint64_t length) {
    if (w->error) return w->error;
    const uint8_t *bytes = (const uint8_t *)data;
    if (length <= HWD_WRITER_BUFFER_SIZE - w->buffer_used) {
        if (length > 0) memcpy(w->buffer + w->buffer_used, bytes, (size_t)length);
        w->buffer_used += (uint32_t)length;
        w->bytes_total += length;
        return 0;
    }
    if (hwd_flush(w)) return w->error;
    if (length <= HWD_WRITER_BUFFER_SIZE) return append(w, data, length);
    if (sink_write(w, bytes, length)) return w->error;
    w->bytes_total += length;
    return 0;
}

static void put_u16(uint8_t *at, uint16_t v) { at[0] = (uint8_t)v; at[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *at, uint32_t v) {
    for (int i = 0; i < 4; i++) at[i] = (uint8_t)(v >> (8 * i));
}

static int check_open(hwd_writer *w) {
    if (w->error) return w->error;
    if (w->ended) return fail(w, HWD_ERROR_ENDED);
    return 0;
}

static int in_array(const hwd_writer *w) {
    return w->depth > 0 && w->containers[w->depth - 1] == HWD_ELEMENT_START_ARRAY;
}

void hwd_writer_init(hwd_writer *w, int fd) {
    memset(w, 0, sizeof *w);
    w->fd = fd;
    w->sink = HWD_SINK_FD;
}

void hwd_writer_init_memory(hwd_writer *w, uint8_t *memory, uint64_t capacity) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->sink = HWD_SINK_MEMORY;
    w->memory = memory;
    w->memory_capacity = memory ? capacity : 0;
}

int hwd_begin_document(hwd_writer *w) {
    if (check_open(w)) return w->error;
    if (w->bytes_total != 0) return fail(w, HWD_ERROR_BAD_NESTING);
    uint8_t header[HWD_HEADER_SIZE] = {0};
    memcpy(header, HWD_MAGIC, HWD_MAGIC_SIZE);
    put_u32(header + HWD_MAGIC_SIZE, HWD_FORMAT_VERSION);
    if (append(w, header, sizeof header)) return w->error;
    return hwd_write_u64(w, HWD_KEY_VERSION, HWD_SCHEMA_VERSION);
}

int hwd_write_property(hwd_writer *w, hwd_key key, const void *value, uint64_t length) {
    if (check_open(w)) return w->error;
    if ((unsigned)key > UINT16_MAX || (value == NULL && length > 0)) return fail(w, HWD_ERROR_INVALID_ARGUMENT);
    if (in_array(w)) return fail(w, HWD_ERROR_BAD_NESTING);
    if (length > HWD_MAX_PROPERTY_SIZE) return fail(w, HWD_ERROR_VALUE_TOO_LARGE);
    uint8_t header[HWD_PROPERTY_HEADER_SIZE];
    header[0] = HWD_ELEMENT_PROPERTY;
    put_u16(header + 1, (uint16_t)key);
    put_u32(header + 3, (uint32_t)length);
    if (append(w, header, sizeof header)) return w->error;
    if (length == 0) return 0;
    return append(w, value, length);
}

int hwd_write_u64(hwd_writer *w, hwd_key key, uint64_t value) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(value >> (8 * i));
    return hwd_write_property(w, key, bytes, sizeof bytes);
}

int hwd_write_i64(hwd_writer *w, hwd_key key, int64_t value) {
    return hwd_write_u64(w, key, (uint64_t)value);
}

int hwd_write_f64(hwd_writer *w, hwd_key key, double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    return hwd_write_u64(w, key, bits);
}

int hwd_write_bool(hwd_writer *w, hwd_key key, int value) {
    return hwd_write_u64(w, key, value ? 1 : 0);
}

int hwd_write_string(hwd_writer *w, hwd_key key, const char *value) {
    uint64_t length = 0;
    if (value) while (value[length] != '\0') length++;  /* no strlen: keep the libc surface minimal */
    return hwd_write_property(w, key, value, length);
}

int hwd_write_u64_array(hwd_writer *w, hwd_key key, const uint64_t *values, uint64_t count) {
    if (count > HWD_MAX_PROPERTY_SIZE / 8) return check_open(w) ? w->error : fail(w, HWD_ERROR_VALUE_TOO_LARGE);
    return hwd_write_property(w, key, values, count * 8);
}

static int start_container(hwd_writer *w, hwd_key key, uint8_t type) {
    if (check_open(w)) return w->error;
    if ((unsigned)key > UINT16_MAX) return fail(w, HWD_ERROR_INVALID_ARGUMENT);
    // Arrays hold only maps, and those maps are keyed HWD_KEY_ARRAY_ITEM.
    if (in_array(w) && type != HWD_ELEMENT_START_MAP) return fail(w, HWD_ERROR_BAD_NESTING);
    if (in_array(w)) key = HWD_KEY_ARRAY_ITEM;
    if (w->depth >= HWD_MAX_DEPTH) return fail(w, HWD_ERROR_TOO_DEEP);
    uint8_t header[HWD_CONTAINER_HEADER_SIZE] = {type};
    put_u16(header + 1, (uint16_t)key);
    if (append(w, header, sizeof header)) return w->error;
    w->containers[w->depth++] = type;
    return 0;
}

static int end_container(hwd_writer *w, uint8_t start_type, uint8_t end_type) {
    if (check_open(w)) return w->error;
    if (w->depth == 0 || w->containers[w->depth - 1] != start_type) return fail(w, HWD_ERROR_BAD_NESTING);
    if (append(w, &end_type, 1)) return w->error;
    w->depth--;
    return 0;
}

int hwd_start_map(hwd_writer *w, hwd_key key) { return start_container(w, key, HWD_ELEMENT_START_MAP); }
int hwd_start_array(hwd_writer *w, hwd_key key) { return start_container(w, key, HWD_ELEMENT_START_ARRAY); }
int hwd_end_map(hwd_writer *w) { return end_container(w, HWD_ELEMENT_START_MAP, HWD_ELEMENT_END_MAP); }
int hwd_end_array(hwd_writer *w) { return end_container(w, HWD_ELEMENT_START_ARRAY, HWD_ELEMENT_END_ARRAY); }

int hwd_end_document(hwd_writer *w) {
    if (check_open(w)) return w->error;
    if (w->depth != 0) return fail(w, HWD_ERROR_BAD_NESTING);
    uint8_t type = HWD_ELEMENT_END_DOCUMENT;
    if (append(w, &type, 1)) return w->error;
    w->ended = 1;
    return hwd_flush(w);
}

const char *hwd_register_name(int index) {
    return index >= 0 && index < HW_REGISTER_COUNT ? hw_register_names[index] : NULL;
}
