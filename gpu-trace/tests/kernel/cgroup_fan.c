/* A tenant spreading denials over many cgroups, for the kernel tests: in
 * each of argv[2] new cgroups under argv[1] (made, then joined), mknod
 * argv[3] (removed again if made) as c (argv[4] + m % K):m for m in
 * 0..argv[5], where K is argv[7] (1 when not given: every node has major
 * argv[4]), argv[6] milliseconds between cgroups; each is refused by the
 * device policy (EPERM). Prints how many were refused and exits 0; 100 on
 * bad arguments, 1 when a cgroup cannot be made or joined. Built with
 * -static. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8)
        return 100;
    unsigned majors = argc == 8 ? (unsigned)atoi(argv[7]) : 1;
    if (majors == 0)
        return 100;
    unsigned cgroups = (unsigned)atoi(argv[2]);
    unsigned major = (unsigned)atoi(argv[4]);
    unsigned minors = (unsigned)atoi(argv[5]);
    long pause_ms = atol(argv[6]);
    struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000};
    long refused = 0;
    char dir[4096], procs[4200];
    for (unsigned c = 0; c < cgroups; c++) {
        snprintf(dir, sizeof dir, "%s/c%u", argv[1], c);
        snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return 1;
        int fd = open(procs, O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1)
            return 1;
        close(fd);
        for (unsigned minor = 0; minor < minors; minor++) {
            if (mknod(argv[3], S_IFCHR | 0600, makedev(major + minor % majors, minor)) == 0)
                unlink(argv[3]);
            else if (errno == EPERM)
                refused++;
        }
        nanosleep(&pause, NULL);
    }
    printf("%ld\n", refused);
    return 0;
}
