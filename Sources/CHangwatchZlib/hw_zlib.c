#include "hw_zlib.h"
#include <zlib.h>
#include <string.h>

// windowBits 15 + 16: a gzip header and trailer instead of zlib's.
enum { HWZ_GZIP_WINDOW_BITS = 15 + 16, HWZ_MEMORY_LEVEL = 8, HWZ_GZIP_OVERHEAD = 18 };

size_t hwz_gzip_bound(size_t length) {
    return (size_t)compressBound((uLong)length) + HWZ_GZIP_OVERHEAD;
}

size_t hwz_gzip(const uint8_t *input, size_t length, uint8_t *output, size_t capacity) {
    z_stream stream;
    memset(&stream, 0, sizeof stream);
    if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, HWZ_GZIP_WINDOW_BITS, HWZ_MEMORY_LEVEL,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
        return 0;
    }
    stream.next_in = (Bytef *)input;
    stream.avail_in = (uInt)length;
    stream.next_out = output;
    stream.avail_out = (uInt)capacity;
    int status = deflate(&stream, Z_FINISH);
    size_t written = stream.total_out;
    deflateEnd(&stream);
    return status == Z_STREAM_END ? written : 0;
}
