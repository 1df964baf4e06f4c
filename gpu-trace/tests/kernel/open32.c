/* A 32-bit process's open, for the kernel tests: opens argv[1] read-write
 * with openat (i386 syscall 295, arguments in ebx, ecx, edx) and exits with
 * the errno, 0 on success. Built with -m32 -static. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 100;
	int fd = openat(AT_FDCWD, argv[1], O_RDWR);
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}
