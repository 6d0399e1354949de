// Standalone C-simulation driver: runs one command of the kernel on files.
//
//   smartsage_csim IMAGE MEMORY_IN MEMORY_OUT DESCRIPTOR_ADDR MAX_FANOUT MAX_HOPS
//
// IMAGE is the storage (the image lies at storage address 0); MEMORY_IN is the device memory before
// the command (descriptor, targets, buffers), MEMORY_OUT receives it after. Both are loaded into heap
// buffers of exactly their size, so that under -fsanitize=address any access outside them is caught.
// Prints the result header as name=value lines. Exit status: 0 header written, 1 no header written,
// 2 bad arguments or I/O error, 3 internal error.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <string.h>

#include "smartsage_kernel.h"

namespace {

bool read_file(const char* path, std::unique_ptr<uint8_t[]>* data, uint64_t* size) {
    FILE* file = fopen(path, "rb");
    if (!file) return false;
    if (fseek(file, 0, SEEK_END) != 0) {
        fclose(file);
        return false;
    }
    const long length = ftell(file);
    if (length < 0 || fseek(file, 0, SEEK_SET) != 0) {
        fclose(file);
        return false;
    }
    data->reset(new uint8_t[length > 0 ? length : 1]);
    const bool ok = length == 0 || fread(data->get(), 1, size_t(length), file) == size_t(length);
    fclose(file);
    *size = uint64_t(length);
    return ok;
}

bool parse_u64(const char* text, uint64_t* value) {
    char* end = nullptr;
    *value = strtoull(text, &end, 0);
    return end && *end == 0 && end != text;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s IMAGE MEMORY_IN MEMORY_OUT DESCRIPTOR_ADDR MAX_FANOUT MAX_HOPS\n", argv[0]);
        return 2;
    }
    std::unique_ptr<uint8_t[]> storage, memory;
    uint64_t storage_size = 0, memory_size = 0, descriptor = 0, max_fanout = 0, max_hops = 0;
    if (!read_file(argv[1], &storage, &storage_size)) {
        fprintf(stderr, "cannot read image %s\n", argv[1]);
        return 2;
    }
    if (!read_file(argv[2], &memory, &memory_size)) {
        fprintf(stderr, "cannot read memory %s\n", argv[2]);
        return 2;
    }
    if (!parse_u64(argv[4], &descriptor) || !parse_u64(argv[5], &max_fanout) || !parse_u64(argv[6], &max_hops)) {
        fprintf(stderr, "descriptor address, max fanout and max hops must be integers\n");
        return 2;
    }
    uint8_t result[SMARTSAGE_RESULT_HEADER_SIZE];
    uint64_t counters[SMARTSAGE_RUN_COUNTERS];
    char error[256];
    const int status = smartsage_run(storage.get(), storage_size, 0, memory.get(), memory_size, descriptor,
                                     uint32_t(max_fanout), uint32_t(max_hops), result, counters, error,
                                     sizeof error);
    if (status < 0) {
        fprintf(stderr, "internal error: %s\n", error);
        return 3;
    }
    FILE* out = fopen(argv[3], "wb");
    if (!out || (memory_size && fwrite(memory.get(), 1, memory_size, out) != memory_size)) {
        fprintf(stderr, "cannot write memory %s\n", argv[3]);
        if (out) fclose(out);
        return 2;
    }
    fclose(out);
    smartsage::ResultRecord record;
    static_assert(sizeof record == sizeof result, "result record size");
    memcpy(&record, result, sizeof record);
    printf("status=%u\nerror_hop=%u\nerror_index=%llu\nerror_value=%llu\nnodes_written=%llu\n"
           "counts_written=%llu\nedges_sampled=%llu\nstorage_bytes=%llu\ndraws=%llu\nstorage_reads=%llu\n"
           "storage_read_bytes=%llu\nstorage_pages=%llu\n",
           record.status, record.error_hop, (unsigned long long)record.error_index,
           (unsigned long long)record.error_value, (unsigned long long)record.nodes_written,
           (unsigned long long)record.counts_written, (unsigned long long)record.edges_sampled,
           (unsigned long long)record.storage_bytes, (unsigned long long)counters[0],
           (unsigned long long)counters[2], (unsigned long long)counters[3], (unsigned long long)counters[4]);
    return status == 1 ? 0 : 1;
}
