/* A launch as LXC makes one, for the kernel tests: it makes the cgroup
 * argv[1], attaches a device program denying char major argv[2] there
 * (closing its own handle on it, as runtimes do), runs a child in the
 * cgroup that opens argv[3] read-write, and removes the cgroup as soon as
 * the child is reaped. Prints the child's open result (0 or an errno) and
 * the microseconds from the reap to the removal. Exits 0; 100 on bad
 * arguments, 1 on a failed step. Built with -static. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

/* r0 = ctx->major == MAJOR ? 0 (deny) : 1 (allow) */
static int load_deny(uint32_t major)
{
    struct bpf_insn insns[] = {
        {.code = BPF_LDX | BPF_W | BPF_MEM, .dst_reg = 2, .src_reg = 1, .off = 4},
        {.code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = 2, .off = 2, .imm = (int32_t)major},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0},
        {.code = BPF_JMP | BPF_EXIT},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 1},
        {.code = BPF_JMP | BPF_EXIT},
    };
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = (uint64_t)(uintptr_t)insns;
    attr.insn_cnt = sizeof(insns) / sizeof(insns[0]);
    attr.license = (uint64_t)(uintptr_t) "GPL";
    strncpy(attr.prog_name, "launch_deny", sizeof(attr.prog_name) - 1);
    return (int)bpf(BPF_PROG_LOAD, &attr);
}

static long long now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 100;
    const char *cgroup = argv[1];
    uint32_t major = (uint32_t)strtoul(argv[2], NULL, 10);
    if (mkdir(cgroup, 0755) != 0)
        return 1;
    int dir = open(cgroup, O_RDONLY | O_DIRECTORY);
    int prog = load_deny(major);
    if (dir < 0 || prog < 0)
        return 1;
    union bpf_attr attach;
    memset(&attach, 0, sizeof(attach));
    attach.target_fd = dir;
    attach.attach_bpf_fd = prog;
    attach.attach_type = BPF_CGROUP_DEVICE;
    attach.attach_flags = BPF_F_ALLOW_MULTI;
    if (bpf(BPF_PROG_ATTACH, &attach) != 0)
        return 1;
    /* The cgroup holds the program now; only its removal lets it go. */
    close(prog);
    close(dir);

    char procs[4096];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", cgroup);
    int results[2];
    if (pipe(results) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {
        int fd = open(procs, O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1)
            _exit(1);
        close(fd);
        int node = open(argv[3], O_RDWR);
        int result = node >= 0 ? 0 : errno;
        if (write(results[1], &result, sizeof(result)) != sizeof(result))
            _exit(1);
        _exit(0);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
        return 1;
    long long reaped = now_us();
    /* A reaped task may hold its cgroup for a moment: retry while busy. */
    while (rmdir(cgroup) != 0) {
        if (errno != EBUSY || now_us() - reaped > 1000000)
            return 1;
    }
    long long removed = now_us();
    int result;
    if (read(results[0], &result, sizeof(result)) != sizeof(result))
        return 1;
    printf("%d\n%lld\n", result, removed - reaped);
    return 0;
}
