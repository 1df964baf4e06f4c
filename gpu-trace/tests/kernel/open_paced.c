/* A steady stream of opens, for the kernel tests: open(argv[1]) read-write
 * argv[2] times at argv[3] opens per second; prints how many failed with
 * EPERM and exits 0, or 100 on bad arguments. Built with -static. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 100;
    long opens = atol(argv[2]);
    double rate = atof(argv[3]);
    if (opens <= 0 || rate <= 0)
        return 100;
    double start = now();
    long refused = 0;
    for (long i = 0; i < opens; i++) {
        int fd = open(argv[1], O_RDWR);
        if (fd >= 0)
            close(fd);
        else if (errno == EPERM)
            refused++;
        double ahead = (i + 1) / rate - (now() - start);
        if (ahead > 0)
            usleep((useconds_t)(ahead * 1e6));
    }
    printf("%ld\n", refused);
    return 0;
}
