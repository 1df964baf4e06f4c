/* A tenant cycling through the minors of a denied major, for the kernel
 * tests: mknod(argv[1], c argv[2]:m) for m in 0..argv[3], over and over for
 * argv[4] seconds; each is refused by the device policy (EPERM). Prints
 * how many were refused and exits 0, or 100 on bad arguments. Built with
 * -static. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 5)
        return 100;
    unsigned major = (unsigned)atoi(argv[2]);
    unsigned minors = (unsigned)atoi(argv[3]);
    time_t end = time(NULL) + atoi(argv[4]);
    long refused = 0;
    while (time(NULL) < end) {
        for (unsigned minor = 0; minor < minors; minor++) {
            if (mknod(argv[1], S_IFCHR | 0600, makedev(major, minor)) == 0)
                unlink(argv[1]);
            else if (errno == EPERM)
                refused++;
        }
    }
    printf("%ld\n", refused);
    return 0;
}
