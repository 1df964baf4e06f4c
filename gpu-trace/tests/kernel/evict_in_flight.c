/* Evicts an open call's entry from gpu-trace's table of calls in flight,
 * for the kernel tests: a thread blocks in open(argv[1], O_RDONLY) on a
 * FIFO; meanwhile argv[2] short-lived threads, one after another, each
 * open /dev/null once (a new thread id each: the table, an LRU, makes
 * room by dropping the least recently used entry, the blocked call's).
 * Then the FIFO is opened for writing, which lets the blocked call
 * return. Prints the blocked thread's id and exits 0; 100 on bad
 * arguments, 1 on a failed call. Built with -static -pthread.
 *
 * Every thread runs on the CPU main started on: the kernel's LRU keeps a
 * new entry in a list of the CPU that made it until that CPU needs room,
 * so a blocked call's entry made on a CPU the flood never visits would
 * outlive any number of newer ones. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *fifo;
static volatile long blocked_tid;

static void *blocked_reader(void *unused)
{
    (void)unused;
    blocked_tid = syscall(SYS_gettid);
    int fd = open(fifo, O_RDONLY);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void *open_once(void *unused)
{
    (void)unused;
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0)
        close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 100;
    fifo = argv[1];
    long threads = atol(argv[2]);
    int cpu = sched_getcpu();
    if (cpu < 0)
        return 1;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        return 1;
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    pthread_t reader;
    if (pthread_create(&reader, &small, blocked_reader, NULL) != 0)
        return 1;
    /* Let the reader reach its open and block there. */
    struct timespec settle = {0, 200000000};
    nanosleep(&settle, NULL);
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, &small, open_once, NULL) != 0)
            return 1;
        pthread_join(t, NULL);
    }
    int fd = open(fifo, O_WRONLY);
    if (fd < 0)
        return 1;
    close(fd);
    pthread_join(reader, NULL);
    printf("%ld\n", blocked_tid);
    return 0;
}
