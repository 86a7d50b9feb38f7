// The intermediate dump format: key numbers (defined here once, for the C writer and the
// Swift reader) and an async-signal-safe streaming writer (no malloc, no locks, no stdio;
// only write(2)), so a crash handler can emit a dump from inside a signal handler.
//
// Wire layout (little-endian; see docs/intermediate-dump-format.md):
//   header      "HWIDUMP\0" (8 bytes), u32 format version, u32 reserved (0)
//   Property    u8 type=1, u16 key, u32 length, <length> value bytes
//   StartMap    u8 type=2, u16 key        StartArray  u8 type=3, u16 key
//   EndMap      u8 type=4                 EndArray    u8 type=5
//   EndDocument u8 type=6
// The first element after the header is the HWD_KEY_VERSION property.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hw_registers.h"

/// The name of register `index` of this architecture's layout (hw_registers.h), NULL past the
/// last: what Swift's `Registers.names` is read from.
const char *hwd_register_name(int index);

#ifdef __cplusplus
extern "C" {
#endif

#define HWD_MAGIC "HWIDUMP"          /* 7 chars + NUL = the 8 magic bytes */
#define HWD_MAGIC_SIZE 8
#define HWD_HEADER_SIZE 16
/// Version of the element framing above; a reader rejects any other value.
#define HWD_FORMAT_VERSION 1u
/// Version of the key schema (the value of HWD_KEY_VERSION). Adding keys bumps it; readers
/// of any schema version skip keys they do not know. 2: kills, tasks. 3: lock waits (313–317),
/// the operations running in a hang (410–415).
#define HWD_SCHEMA_VERSION 3u

#define HWD_PROPERTY_HEADER_SIZE 7     /* type + key + length */
#define HWD_CONTAINER_HEADER_SIZE 3    /* type + key */
/// Largest property value a writer emits and a reader accepts.
#define HWD_MAX_PROPERTY_SIZE 16777216u /* 16 MiB; a plain literal so Swift imports it */
/// Deepest container nesting (maps and arrays) a writer emits and a reader accepts.
#define HWD_MAX_DEPTH 16
/// The architecture's registers in hw_registers.h order; HWD_KEY_THREAD_REGISTERS holds exactly this many u64.
#define HWD_REGISTER_COUNT HW_REGISTER_COUNT
#define HWD_WRITER_BUFFER_SIZE 4096

typedef enum hwd_element_type {
    HWD_ELEMENT_PROPERTY = 1,
    HWD_ELEMENT_START_MAP = 2,
    HWD_ELEMENT_START_ARRAY = 3,
    HWD_ELEMENT_END_MAP = 4,
    HWD_ELEMENT_END_ARRAY = 5,
    HWD_ELEMENT_END_DOCUMENT = 6,
} hwd_element_type;

// Key numbers. RULE: a number, once released, is NEVER renumbered or reused for a different
// meaning — old dumps on disk and old readers depend on them. Add new keys in the gaps
// (each section owns a block of 100) and bump HWD_SCHEMA_VERSION.
// Types: u64 = 8-byte unsigned, i64 = 8-byte two's complement, f64 = 8-byte IEEE-754,
// bool = u64 0/1, str = UTF-8 bytes, bytes = raw, u64[] = packed 8-byte values.
typedef enum hwd_key {
    /// Key of every map that is an item of an array.
    HWD_KEY_ARRAY_ITEM = 0,
    /// u64 schema version; always the first element.
    HWD_KEY_VERSION = 1,

    /// map: why the snapshot was taken. 130–199 reserved for crash context.
    HWD_KEY_REASON = 100,
    HWD_KEY_REASON_KIND = 101,               /* u64: hwd_reason_kind */
    HWD_KEY_REASON_TIMESTAMP = 102,          /* f64: capture wall time, s since 1970 */
    HWD_KEY_HANG_TARGET = 110,               /* str */
    HWD_KEY_HANG_THRESHOLD = 111,            /* f64 seconds */
    HWD_KEY_HANG_DURATION = 112,             /* f64 seconds */
    HWD_KEY_HANG_RECOVERED = 113,            /* bool */
    HWD_KEY_HANG_START_TIME = 114,           /* f64: s since 1970 */
    HWD_KEY_SIGNAL_NUMBER = 120,             /* i64 */
    HWD_KEY_SIGNAL_CODE = 121,               /* i64 */
    HWD_KEY_SIGNAL_ADDRESS = 122,            /* u64 */
    HWD_KEY_SIGNAL_TID = 123,                /* i64 */
    HWD_KEY_SIGNAL_MESSAGE = 124,            /* str, absent when none */
    HWD_KEY_KILL_SIGNAL = 130,               /* i64: the signal a killed process died of, absent when unknown (schema 2) */
    HWD_KEY_KILL_CAUSE = 131,                /* str: oom, signal or unknown (schema 2) */

    /// map: the process.
    HWD_KEY_PROCESS = 200,
    HWD_KEY_PROCESS_PID = 201,               /* i64 */
    HWD_KEY_PROCESS_NAME = 202,              /* str */
    HWD_KEY_PROCESS_EXECUTABLE = 203,        /* str */
    HWD_KEY_PROCESS_ARGUMENTS = 204,         /* array of maps holding HWD_KEY_PROCESS_ARGUMENT */
    HWD_KEY_PROCESS_ARGUMENT = 205,          /* str */
    HWD_KEY_PROCESS_BUNDLE_ID = 206,         /* str */

    /// array of maps: one per thread.
    HWD_KEY_THREADS = 300,
    HWD_KEY_THREAD_TID = 301,                /* i64 */
    HWD_KEY_THREAD_NAME = 302,               /* str */
    HWD_KEY_THREAD_STATE = 303,              /* str */
    HWD_KEY_THREAD_SYSCALL = 304,            /* str, absent when unknown */
    HWD_KEY_THREAD_USER_CPU = 305,           /* f64 seconds */
    HWD_KEY_THREAD_SYSTEM_CPU = 306,         /* f64 seconds */
    HWD_KEY_THREAD_ROLES = 307,              /* u64 bits (ThreadRoles) */
    HWD_KEY_THREAD_CAPTURE_STATUS = 308,     /* u64 (ThreadCaptureStatus) */
    HWD_KEY_THREAD_REGISTERS = 309,          /* u64[HWD_REGISTER_COUNT], absent when unknown */
    HWD_KEY_THREAD_FRAMES = 310,             /* u64[] */
    HWD_KEY_THREAD_QUEUE_LABEL = 311,        /* str, absent when none */
    HWD_KEY_THREAD_STACK_MEMORY = 312,       /* bytes */
    HWD_KEY_THREAD_LOCK_KIND = 313,          /* u64 (LockKind.wire), absent when it waits for no lock */
    HWD_KEY_THREAD_LOCK_ADDRESS = 314,       /* u64 */
    HWD_KEY_THREAD_LOCK_HOLDER = 315,        /* i64, absent when unknown */
    HWD_KEY_THREAD_LOCK_UNKNOWN = 316,       /* str: why the holder is unknown; absent when named */
    HWD_KEY_THREAD_LOCK_LABEL = 317,         /* str: a queue's label; absent when none */

    /// array of maps: stacks sampled while a hang lasted.
    HWD_KEY_HANG_SAMPLES = 400,
    HWD_KEY_SAMPLE_TID = 401,                /* i64 */
    HWD_KEY_SAMPLE_COUNT = 402,              /* i64 */
    HWD_KEY_SAMPLE_FRAMES = 403,             /* u64[] */
    /// array of maps: the watched operations (HangMonitor.watch) running when a hang was captured.
    HWD_KEY_HANG_OPERATIONS = 410,
    HWD_KEY_OPERATION_NAME = 411,            /* str */
    HWD_KEY_OPERATION_START_TIME = 412,      /* f64: s since 1970 */
    HWD_KEY_OPERATION_LIMIT = 413,           /* f64 seconds */
    HWD_KEY_OPERATION_TASK = 414,            /* u64: its task's address, absent when none */
    HWD_KEY_OPERATION_THREAD = 415,          /* i64: the thread it began on */
    HWD_KEY_OPERATION_TRACEPARENT = 416,     /* str: its request's W3C traceparent, absent when none */

    /// array of maps: loaded ELF objects.
    HWD_KEY_MODULES = 500,
    HWD_KEY_MODULE_PATH = 501,               /* str */
    HWD_KEY_MODULE_BASE = 502,               /* u64 */
    HWD_KEY_MODULE_START = 503,              /* u64 */
    HWD_KEY_MODULE_END = 504,                /* u64 */
    HWD_KEY_MODULE_BUILD_ID = 505,           /* str, lowercase hex */

    /// array of maps: key/value annotations.
    HWD_KEY_ANNOTATIONS = 600,
    HWD_KEY_ANNOTATION_KEY = 601,            /* str */
    HWD_KEY_ANNOTATION_VALUE = 602,          /* str */

    HWD_KEY_CAPTURE_DURATION = 700,          /* f64 seconds */
    HWD_KEY_INCOMPLETE = 701,                /* bool: the snapshot written was itself incomplete */
    // 800–899: free for later sections (e.g. a stderr tail).

    /// map: the process's Swift tasks (schema 2; docs/tasks.md), when they were read.
    HWD_KEY_TASKS = 900,
    HWD_KEY_TASKS_SCANNED_BYTES = 901,       /* u64 */
    HWD_KEY_TASKS_DURATION = 902,            /* f64 seconds */
    HWD_KEY_TASKS_TRUNCATED = 903,           /* bool */
    HWD_KEY_TASKS_ERROR = 904,               /* str, absent when the reading worked */
    HWD_KEY_TASKS_RUNTIME = 905,             /* str */
    HWD_KEY_TASKS_LIST = 906,                /* array of maps, one per task */
    HWD_KEY_TASKS_UNTOUCHED_BYTES = 907,     /* u64, absent when 0 */
    HWD_KEY_TASKS_UNREAD_BYTES = 908,        /* u64, absent when 0 */
    HWD_KEY_TASKS_UNREAD = 909,              /* str: why memory was left unread; absent when all was read */
    HWD_KEY_TASK_ADDRESS = 910,              /* u64 (written first in the item) */
    HWD_KEY_TASK_ID = 911,                   /* u64 */
    HWD_KEY_TASK_STATE = 912,                /* u64: 0 running, 1 enqueued, 2 suspended */
    HWD_KEY_TASK_THREAD = 913,               /* i64, absent when unknown */
    HWD_KEY_TASK_PARENT = 914,               /* u64, absent when none */
    HWD_KEY_TASK_FRAMES = 915,               /* u64[]: the await chain, innermost first */
    HWD_KEY_TASK_CHAIN_CUT = 916,            /* bool, written only when true */
    HWD_KEY_TASK_FLAGS = 917,                /* u64 (TaskFlags) */
    HWD_KEY_TASK_NAME = 918,                 /* str, absent when none */
    HWD_KEY_TASK_WAIT_KIND = 919,            /* u64: 0 task, 1 continuation, 2 group, 3 executor; absent when unknown */
    HWD_KEY_TASK_WAIT_ADDRESS = 920,         /* u64, with 919 */
} hwd_key;

typedef enum hwd_reason_kind {
    HWD_REASON_DUMP_REQUESTED = 0,
    HWD_REASON_HANG = 1,
    HWD_REASON_CRASH = 2,
    HWD_REASON_KILLED = 3,                   /* schema 2 */
} hwd_reason_kind;

/// Sticky writer errors that are not an errno value (errno values are positive and small).
enum {
    HWD_ERROR_NONE = 0,
    HWD_ERROR_VALUE_TOO_LARGE = 1000,  /* property longer than HWD_MAX_PROPERTY_SIZE */
    HWD_ERROR_TOO_DEEP = 1001,         /* nesting beyond HWD_MAX_DEPTH */
    HWD_ERROR_BAD_NESTING = 1002,      /* end without start, map/array mismatch, property in an array */
    HWD_ERROR_NO_SPACE = 1003,         /* memory sink full */
    HWD_ERROR_SHORT_WRITE = 1004,      /* write(2) returned 0 */
    HWD_ERROR_ENDED = 1005,            /* element after EndDocument */
    HWD_ERROR_INVALID_ARGUMENT = 1006, /* NULL value with a non-zero length, key above u16 */
};

typedef enum hwd_sink_kind {
    HWD_SINK_FD = 0,      /* write(2) to fd */
    HWD_SINK_MEMORY = 1,  /* copy into a caller-owned region; with capacity 0 it only counts */
} hwd_sink_kind;

/// All state lives inside the struct: a writer can be preallocated (e.g. static) and used
/// from a signal handler. Not thread-safe: one writer per thread at a time.
typedef struct hwd_writer {
    int fd;
    int32_t sink;                /* hwd_sink_kind */
    int32_t error;               /* sticky: first failure, 0 while healthy */
    int32_t depth;
    uint8_t containers[HWD_MAX_DEPTH]; /* element type of each open container */
    uint8_t ended;
    uint8_t *memory;             /* HWD_SINK_MEMORY destination (may be NULL with capacity 0) */
    uint64_t memory_capacity;
    uint64_t bytes_total;        /* bytes produced so far, flushed or not */
    uint32_t buffer_used;
    uint8_t buffer[HWD_WRITER_BUFFER_SIZE];
} hwd_writer;

/// Writes to `fd` (which the caller owns and closes).
void hwd_writer_init(hwd_writer *w, int fd);
/// Writes into `memory[0..<capacity]`; with capacity 0 only counts bytes (`bytes_total`),
/// which is how a caller learns the size to allocate before a second pass.
void hwd_writer_init_memory(hwd_writer *w, uint8_t *memory, uint64_t capacity);

/// Every function returns the writer's sticky error: 0 on success. After a failure, later
/// calls do nothing and return the same error.
int hwd_begin_document(hwd_writer *w);   /* header + HWD_KEY_VERSION property */
int hwd_write_property(hwd_writer *w, hwd_key key, const void *value, uint64_t length);
int hwd_write_u64(hwd_writer *w, hwd_key key, uint64_t value);
int hwd_write_i64(hwd_writer *w, hwd_key key, int64_t value);
int hwd_write_f64(hwd_writer *w, hwd_key key, double value);
int hwd_write_bool(hwd_writer *w, hwd_key key, int value);
/// NUL-terminated UTF-8 (NULL writes an empty string).
int hwd_write_string(hwd_writer *w, hwd_key key, const char *value);
int hwd_write_u64_array(hwd_writer *w, hwd_key key, const uint64_t *values, uint64_t count);
int hwd_start_map(hwd_writer *w, hwd_key key);
int hwd_end_map(hwd_writer *w);
int hwd_start_array(hwd_writer *w, hwd_key key);
int hwd_end_array(hwd_writer *w);
/// Requires every container closed; flushes.
int hwd_end_document(hwd_writer *w);
/// Pushes buffered bytes to the sink (write(2), retried on EINTR and partial writes).
int hwd_flush(hwd_writer *w);

#ifdef __cplusplus
}
#endif
