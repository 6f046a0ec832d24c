// What a random access to a working set costs on this machine, in the pattern of
// `lanner bench scale`: a few dependent cache lines per "call" (the client's proxy, the
// server's table entry, the object), with unrelated memory traffic between calls
// (docs/decisions.md, "Thirty-sixth session").
//
//   gcc -O2 -o /tmp/miss_cost scripts/miss_cost.c && /tmp/miss_cost
//
// Part 1, pointer chase: one dependent load after another through a random cycle of
// 64-byte lines filling N bytes (the latency of each level of the hierarchy, TLB misses
// included, 4 KiB pages).
// Part 2, calls: per call, three dependent loads into a set of `objects` x 3 lines, after
// walking OTHER KiB of a separate buffer (the rest of a call's memory traffic). The time
// printed includes one clock read (about 20 ns).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

// A random cycle through `lines` 64-byte lines; returns the start of the cycle.
static uint64_t *random_cycle(size_t lines, uint64_t **memory) {
    uint64_t *a = aligned_alloc(64, lines * 64);
    size_t *order = malloc(lines * sizeof(size_t));
    for (size_t i = 0; i < lines; i++) order[i] = i;
    srand(1);
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = ((size_t)rand() * RAND_MAX + rand()) % (i + 1);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        a[order[i] * 8] = (uint64_t)&a[order[(i + 1) % lines] * 8];
    uint64_t *start = (uint64_t *)a[order[0] * 8];
    free(order);
    *memory = a;
    return start;
}

static void pointer_chase(void) {
    const size_t kib[] = {16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072};
    for (size_t s = 0; s < sizeof kib / sizeof kib[0]; s++) {
        uint64_t *memory;
        size_t lines = kib[s] * 1024 / 64;
        uint64_t *p = random_cycle(lines, &memory);
        for (size_t i = 0; i < lines; i++) p = (uint64_t *)*p;
        const size_t hops = 4000000;
        double start = now_ns();
        for (size_t i = 0; i < hops; i++) p = (uint64_t *)*p;
        double took = now_ns() - start;
        printf("chase %6zu KiB: %6.1f ns per load (%p)\n", kib[s], took / hops, (void *)p);
        free(memory);
    }
}

static void calls(size_t other_kib) {
    const size_t objects[] = {128, 1000, 4000, 16000, 100000};
    size_t words = other_kib * 1024 / 8;
    uint64_t *other = calloc(words + 1, 8);
    size_t at = 0;
    volatile uint64_t sink = 0;
    for (size_t s = 0; s < sizeof objects / sizeof objects[0]; s++) {
        uint64_t *memory;
        size_t lines = objects[s] * 3;
        uint64_t *p = random_cycle(lines, &memory);
        for (size_t i = 0; i < lines; i++) p = (uint64_t *)*p;
        const size_t count = 200000;
        double total = 0;
        for (size_t i = 0; i < count; i++) {
            uint64_t sum = 0;
            for (size_t k = 0; k < 64 && words; k++) {
                sum += other[at];
                at = (at + 8) % words;
            }
            sink += sum;
            double start = now_ns();
            p = (uint64_t *)*p;
            p = (uint64_t *)*p;
            p = (uint64_t *)*p;
            total += now_ns() - start;
        }
        printf("calls, %5zu KiB between: %6zu objects: %6.1f ns per 3 dependent loads (%p)\n",
               other_kib, objects[s], total / count, (void *)p);
        free(memory);
    }
    free(other);
}

int main(void) {
    pointer_chase();
    calls(0);
    calls(512);
    calls(8192);
    return 0;
}
