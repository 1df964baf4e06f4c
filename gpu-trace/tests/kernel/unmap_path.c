/* A denied open whose path another thread keeps unmapping, for the kernel
 * tests: the path argv[1] (a node the policy denies) sits in a shared
 * memfd page that a second thread drops from the process over and over
 * (MADV_DONTNEED: the page stays in the memfd, and the next touch maps it
 * back). The kernel's own copy of the path faults the page in; a tracer's
 * later read of the same address, which may not fault, then finds nothing
 * there some of the time. Opens for argv[2] milliseconds; prints how many
 * failed with EPERM (each a denied device check) and exits 0, or 100-103
 * when the setup failed. Built with -static. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static char *page;
static atomic_int done;

static void *unmap(void *unused)
{
    (void)unused;
    while (!atomic_load_explicit(&done, memory_order_relaxed))
        madvise(page, 4096, MADV_DONTNEED);
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3 || strlen(argv[1]) >= 4096)
        return 100;
    int fd = memfd_create("path", 0);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return 101;
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED)
        return 102;
    strcpy(page, argv[1]);
    double until = now() + atol(argv[2]) / 1e3;
    pthread_t unmapper;
    if (pthread_create(&unmapper, NULL, unmap, NULL) != 0)
        return 103;
    long denied = 0;
    while (now() < until) {
        int node = open(page, O_RDWR);
        if (node >= 0)
            close(node);
        else if (errno == EPERM)
            denied++;
    }
    atomic_store(&done, 1);
    pthread_join(unmapper, NULL);
    printf("%ld\n", denied);
    return 0;
}
