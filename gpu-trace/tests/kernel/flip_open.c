/* A denied open whose path buffer another thread rewrites mid-call, for
 * the kernel tests: argv[1] is a node the policy denies, argv[2] a path of
 * the same length that differs within its first 32 bytes (and does not
 * exist), argv[3] how many opens to make. One thread opens the buffer over
 * and over while another swaps its contents; prints how many opens failed
 * with EPERM (each a denied device check) and exits 0, or 100-102 when the
 * setup failed. Built with -static. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char buffer[4096];
static const char *paths[2];
static size_t length;
static atomic_int done;

static void *flip(void *unused)
{
    (void)unused;
    for (unsigned i = 0; !atomic_load_explicit(&done, memory_order_relaxed); i++)
        memcpy(buffer, paths[i & 1], length);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 100;
    paths[0] = argv[1];
    paths[1] = argv[2];
    length = strlen(argv[1]) + 1;
    if (length != strlen(argv[2]) + 1 || length > sizeof(buffer))
        return 101;
    memcpy(buffer, paths[0], length);
    long opens = atol(argv[3]);
    pthread_t flipper;
    if (pthread_create(&flipper, NULL, flip, NULL) != 0)
        return 102;
    long denied = 0;
    for (long i = 0; i < opens; i++) {
        int fd = open(buffer, O_RDWR);
        if (fd >= 0)
            close(fd);
        else if (errno == EPERM)
            denied++;
    }
    atomic_store(&done, 1);
    pthread_join(flipper, NULL);
    printf("%ld\n", denied);
    return 0;
}
