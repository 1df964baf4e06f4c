/* The liveness bench's probe (gpu-trace/benches/gpu_trace/liveness.rs):
   opens PATH N times at RATE per second, each open under a command name of
   its own (lp00000, lp00001, ...), so that watch's fold sees every one as a
   first sighting and writes it at once. Prints N. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    if (argc != 4) return 100;
    const char *path = argv[1];
    long n = atol(argv[2]);
    double rate = atof(argv[3]);
    if (n < 0 || n > 99999 || rate <= 0) return 100;
    double start = now();
    char name[16];
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "lp%05ld", i);
        prctl(PR_SET_NAME, name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0) close(fd);
        double ahead = (i + 1) / rate - (now() - start);
        if (ahead > 0) usleep((useconds_t)(ahead * 1e6));
    }
    printf("%ld\n", n);
    return 0;
}
