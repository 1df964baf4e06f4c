/* The benchmark's workload (gpu-trace/benches/gpu_trace.rs): open()+close()
   of PATH, N times, or getppid() with PATH --getppid; prints ns per call. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    const char *path = argv[1];
    long n = atol(argv[2]);
    double rate = argc > 3 ? atof(argv[3]) : 0; /* opens per second, 0: flat out */
    double start = now();
    long ok = 0;
    if (strcmp(path, "--getppid") == 0) {
        for (long i = 0; i < n; i++) ok += syscall(SYS_getppid) > 0;
        printf("%.2f %ld\n", (now() - start) * 1e9 / n, ok);
        return 0;
    }
    for (long i = 0; i < n; i++) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) { close(fd); ok++; }
        if (rate > 0 && i % 64 == 63) {
            double ahead = (i + 1) / rate - (now() - start);
            if (ahead > 0) usleep((useconds_t)(ahead * 1e6));
        }
    }
    printf("%.2f %ld\n", (now() - start) * 1e9 / n, ok);
    return 0;
}
